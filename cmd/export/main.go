// Command export converts a native forkline dataset into other formats.
//
//	export -in runs/demo -to jsonl -out runs/demo.jsonl
//	export -in runs/demo -to jsonl -out - | jq .exit_reason
//
// Targets today: jsonl (every episode with its steps and rewards, one JSON
// object per line). The trainer formats (verl, Hugging Face, TRL/OpenAI) are
// tracked as their own work and are not offered until they are real.
//
// Exit codes: 0 written, 1 failed, 2 bad input.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/forkline/forkline/formats/jsonl"
	"github.com/forkline/forkline/formats/shard"
)

const (
	exitOK       = 0
	exitFailed   = 1
	exitBadInput = 2
)

// target writes one dataset to w.
type target func(ds *shard.Dataset, w io.Writer) (int, error)

var targets = map[string]target{
	"jsonl": jsonl.Write,
}

func targetNames() string {
	var n []string
	for k := range targets {
		n = append(n, k)
	}
	sort.Strings(n)
	return strings.Join(n, ", ")
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "native dataset `DIR` written by collect (required)")
	to := fs.String("to", "", "target format: "+targetNames())
	out := fs.String("out", "", "output `FILE`, or - for stdout (required)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitBadInput
	}
	if *in == "" || *out == "" || *to == "" {
		fmt.Fprintln(stderr, "export: -in, -to and -out are required (see -h)")
		return exitBadInput
	}
	write, ok := targets[*to]
	if !ok {
		fmt.Fprintf(stderr, "export: unknown target %q (known: %s)\n", *to, targetNames())
		return exitBadInput
	}
	ds, err := shard.Open(*in)
	if err != nil {
		fmt.Fprintln(stderr, "export:", err)
		return exitBadInput
	}
	if *out == "-" {
		n, err := write(ds, stdout)
		if err != nil {
			fmt.Fprintln(stderr, "export:", err)
			return exitFailed
		}
		fmt.Fprintf(stderr, "export: %d episodes\n", n)
		return exitOK
	}
	// Write to a temporary name and rename, so a failed export leaves no
	// half-written file that looks finished.
	tmp, err := os.CreateTemp(filepath.Dir(*out), "."+filepath.Base(*out)+".*.tmp")
	if err != nil {
		fmt.Fprintln(stderr, "export:", err)
		return exitFailed
	}
	defer os.Remove(tmp.Name())
	n, err := write(ds, tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), *out)
	}
	if err != nil {
		fmt.Fprintln(stderr, "export:", err)
		return exitFailed
	}
	fmt.Fprintf(stderr, "export: %d episodes to %s\n", n, *out)
	return exitOK
}
