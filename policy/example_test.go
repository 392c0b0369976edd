package policy_test

import (
	"context"
	"fmt"
	"log"

	"github.com/forkline/forkline/policy"
	_ "github.com/forkline/forkline/policy/script" // registers "script"
	"github.com/forkline/forkline/runtime"
)

// A policy opened by name, and one runtime.Policy made per episode (the
// record a manifest keeps of it is manifest.NewPolicy's).
func Example() {
	opts := policy.Options{} // the script policy takes no Params
	src, err := policy.Open("script", opts)
	if err != nil {
		log.Fatal(err) // an unknown name lists the known ones
	}
	ep := policy.Episode{ID: "ep-1", Instruction: "say hi",
		Solution: []runtime.Action{{Kind: runtime.ActExec, Cmd: "echo hi"}, {Kind: runtime.ActDone}}}
	p, err := src.NewPolicy(ep)
	if err != nil {
		log.Fatal(err)
	}
	d, err := p.Decide(context.Background(), runtime.History{Instruction: ep.Instruction})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Action.Cmd)

	// Output:
	// echo hi
}
