package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
)

type mergeOptions struct {
	out string
	in  []string
}

func mergeCommand() *cli.Command {
	return &cli.Command{
		Name:    "merge",
		Summary: "join the parts of one plan (collect -shard i/n on n machines) into one dataset",
		About: `Re-commits the episodes of every part, one at a time, into a new dataset in -out (a missing or
empty directory). It refuses parts that overlap (an episode id twice) or that disagree on the tasks
(spec hashes), repeats, seed or capture policy, and marks the result partial, naming the missing
parts, unless every part is there and complete.`,
		Args: "[PART...]", MaxArgs: -1,
		Arguments: []cli.Argument{{Name: "PART...", Usage: "the parts' dataset directories (the same as -in PART; both may be given)"}},
		Examples: []string{
			"forkline merge -out runs/all runs/part-*",
			"forkline merge -out runs/all -in runs/part-0 -in runs/part-1 -json",
		},
		Exits: []cli.Exit{
			{Code: cli.ExitOK, Meaning: "merged, and the result is complete"},
			{Code: cli.ExitFailed, Meaning: "merged but partial (parts missing or partial), or the merge failed while writing"},
			{Code: cli.ExitBadInput, Meaning: "parts that do not belong together, a part that is not a dataset, or an -out that is not empty"},
			{Code: cli.ExitInterrupted, Meaning: "interrupted by SIGINT/SIGTERM"},
		},
		Setup: func(f *cli.FlagSet) cli.Runner {
			o := &mergeOptions{}
			f.Group("output", "")
			f.String(&o.out, "out", "DIR", "the merged dataset's directory (missing or empty)").Require()
			f.Group("input", "-in runs/part-0 -in runs/part-1")
			f.Strings(&o.in, "in", "PART", "a part's dataset directory")
			f.Logging()
			return func(ctx context.Context, inv *cli.Invocation) int { return runMerge(ctx, inv, o) }
		},
	}
}

func runMerge(ctx context.Context, inv *cli.Invocation, o *mergeOptions) int {
	parts := append(append([]string(nil), o.in...), inv.Args...)
	if len(parts) == 0 {
		inv.Errorf("no parts given: name them as arguments or with -in (see -h)")
		return cli.ExitBadInput
	}
	inv.Notef("%s: joining %d parts into %s", inv.Prefix(), len(parts), o.out)
	rep, err := collect.Merge(ctx, o.out, parts, shard.DefaultConfig())
	switch {
	case errors.Is(err, context.Canceled):
		return inv.Fail(cli.ExitInterrupted, err)
	case errors.Is(err, collect.ErrMerge), errors.Is(err, shard.ErrNoDataset), errors.Is(err, shard.ErrSchemaVersion):
		return inv.Fail(cli.ExitBadInput, err)
	case err != nil:
		return inv.Fail(cli.ExitFailed, err)
	}
	if inv.JSON {
		inv.PrintJSON(rep)
	} else {
		fmt.Fprintf(inv.Stdout, "forkline merge: %s — %d episodes from %d parts into %s\n", rep.Status, rep.Episodes, len(rep.Parts), o.out)
		for _, p := range rep.Parts {
			fmt.Fprintf(inv.Stdout, "  %-40s part %s  %-8s %d episodes\n", p.Dir, p.Part, p.Status, p.Episodes)
		}
		if len(rep.Missing) > 0 {
			fmt.Fprintf(inv.Stdout, "  missing parts: %v\n", rep.Missing)
		}
	}
	if rep.Status != shard.StatusComplete {
		return cli.ExitFailed
	}
	return cli.ExitOK
}
