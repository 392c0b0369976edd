package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/manifest"
)

type verifyOptions struct{ in string }

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:    "verify",
		Summary: "check a dataset: shards, sha256 hashes, row counts, manifest, tasks sidecar",
		About: `Checks everything readers rely on and reports every problem rather than the first: the manifest
is forkline's and holds together, and its provider, policy, plan, capture and summary entries read
as every command reads them; every listed shard exists with its recorded size and sha256
(re-hashed), its footer's row count, schema version, table and run id; the rows add up to the
manifest's counts; every generation has its episodes shard, episode ids are unique, and every step
and reward row belongs to an episode of its generation; no episode is kept as done while its
verifier errored (its reward would be missing, not the task's outcome). Leftovers of a crash (unlisted shards,
temporary files) and foreign files are listed, not problems.`,
		Args: "DIR", ArgsFirst: true, MaxArgs: 1,
		Arguments: []cli.Argument{{Name: "DIR", Usage: "the dataset directory (or -in DIR)"}},
		Examples:  []string{"forkline verify runs/demo", "forkline verify runs/demo -json | jq .problems"},
		Exits: []cli.Exit{
			{Code: cli.ExitOK, Meaning: "the dataset is sound"},
			{Code: cli.ExitFailed, Meaning: "problems were found (each is printed, naming the file)"},
			{Code: cli.ExitBadInput, Meaning: "not a dataset: no manifest.json, or one this build cannot read"},
		},
		Setup: func(f *cli.FlagSet) cli.Runner {
			o := &verifyOptions{}
			f.Group("input", "")
			f.String(&o.in, "in", "DIR", "the dataset directory (the same as the argument)")
			return func(ctx context.Context, inv *cli.Invocation) int { return runVerify(inv, o) }
		},
	}
}

// datasetArg returns the one dataset directory given as the argument or
// with -in.
func datasetArg(inv *cli.Invocation, in string) (string, bool) {
	switch {
	case in != "" && len(inv.Args) > 0:
		inv.Errorf("give the dataset as the argument or with -in, not both")
		return "", false
	case in != "":
		return in, true
	case len(inv.Args) == 1:
		return inv.Args[0], true
	}
	inv.Errorf("missing DIR: the dataset directory (usage: %s DIR [flags])", inv.Prefix())
	return "", false
}

// verifyReport is Verify's report as -json prints it.
type verifyReport struct {
	Dir         string           `json:"dir"`
	OK          bool             `json:"ok"`
	Status      shard.Status     `json:"status"`
	Generations int              `json:"generations"`
	Shards      int              `json:"shards"`
	Bytes       int64            `json:"bytes"`
	Rows        map[string]int64 `json:"rows"`
	Problems    []string         `json:"problems"`
	Unlisted    []string         `json:"unlisted"`
	Foreign     []string         `json:"foreign"`
}

func runVerify(inv *cli.Invocation, o *verifyOptions) int {
	dir, ok := datasetArg(inv, o.in)
	if !ok {
		return cli.ExitBadInput
	}
	rep, err := shard.Verify(dir)
	if err != nil {
		if errors.Is(err, shard.ErrNoDataset) || errors.Is(err, shard.ErrSchemaVersion) {
			return inv.Fail(cli.ExitBadInput, err)
		}
		// A manifest that cannot be decoded, or whose own bookkeeping
		// does not hold together: a damaged dataset.
		return inv.Fail(cli.ExitFailed, err)
	}
	// The manifest's entries, read by the types every command writes and
	// reads them with: an entry inspect or export could not read is a
	// problem here too.
	_, entryProblems := manifest.Read(rep.Manifest)
	for _, p := range entryProblems {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %v", filepath.Join(dir, shard.ManifestFile), p))
	}
	if inv.JSON {
		inv.PrintJSON(verifyReport{Dir: dir, OK: rep.OK(), Status: rep.Status, Generations: rep.Generations, Shards: rep.Shards,
			Bytes: rep.Bytes, Rows: rep.Rows, Problems: nonNil(rep.Problems), Unlisted: nonNil(rep.Unlisted), Foreign: nonNil(rep.Foreign)})
	} else {
		verdict := "ok"
		switch n := len(rep.Problems); {
		case n == 1:
			verdict = "1 problem"
		case n > 1:
			verdict = fmt.Sprintf("%d problems", n)
		}
		fmt.Fprintf(inv.Stdout, "forkline verify: %s: %s — %s, %d generations, %d shards, %d bytes; rows: steps %d, episodes %d, rewards %d, blobs %d\n",
			dir, verdict, rep.Status, rep.Generations, rep.Shards, rep.Bytes,
			rep.Rows["steps"], rep.Rows["episodes"], rep.Rows["rewards"], rep.Rows["blobs"])
		for _, p := range rep.Problems {
			fmt.Fprintf(inv.Stdout, "  problem: %s\n", p)
		}
		for _, u := range rep.Unlisted {
			fmt.Fprintf(inv.Stdout, "  leftover (not part of the dataset; a resume deletes it): %s\n", u)
		}
		for _, x := range rep.Foreign {
			fmt.Fprintf(inv.Stdout, "  foreign file (not forkline's; readers ignore it): %s\n", x)
		}
	}
	if !rep.OK() {
		return cli.ExitFailed
	}
	return cli.ExitOK
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
