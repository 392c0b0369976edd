package manifest_test

import (
	"fmt"
	"log"

	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/policy"
	_ "github.com/forkline/forkline/policy/script" // registers "script"
)

// The record a manifest keeps of a policy, as collect writes it and every
// reader decodes it.
func ExampleNewPolicy() {
	opts := policy.Options{}
	src, err := policy.Open("script", opts)
	if err != nil {
		log.Fatal(err)
	}
	rec, err := manifest.NewPolicy("script", opts, src)
	if err != nil {
		log.Fatal(err)
	}
	raw := rec.Encode()
	fmt.Println(string(raw))
	back, err := manifest.DecodePolicy(raw)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(back.Name, back.Conversation == nil)
	// Output:
	// {"name":"script","script_file":"","script_sha256":"","options":{}}
	// script true
}
