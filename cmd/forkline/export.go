package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/formats/chat"
	"github.com/forkline/forkline/formats/hf"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/progress"
)

type exportOptions struct {
	o         export.Options
	wheres    []string
	minReward string
	split     string
	rows      string
	toolArgs  string
}

func exportCommand() *cli.Command {
	var targets []cli.Argument
	for _, n := range export.Targets() {
		t, _ := export.Describe(n)
		targets = append(targets, cli.Argument{Name: n, Usage: t.Summary + " → " + t.Layout})
	}
	return &cli.Command{
		Name:    "export",
		Summary: "convert datasets into trainer formats: verl, Hugging Face, TRL/OpenAI JSONL",
		About: `Reads one or more datasets (every shard checked against its manifest's sha256 first), selects
episodes (-task, -episode, -where, -min-reward: all must hold), assigns each to a split by a hash of
its episode id (so it stays in its split across exports), joins the reward named -reward and writes
the target. Output is built in a hidden sibling directory and renamed into place; an existing -out is
replaced only with -force, and only when an earlier export wrote it. The same inputs and flags give
the same bytes.

Tool messages are the observations as the policy showed them to the model (aci.ObservationText),
so SFT data matches inference.`,
		Sections: []cli.Section{{Title: "targets", Entries: targets}},
		Examples: []string{
			"forkline export -in runs/demo -to hf -out out/hf -split train=0.95,test=0.05 -where exit_reason=done",
			"forkline export -in runs/rl -to verl-agent -out out/verl -min-reward 0.5",
			"forkline export -in runs/demo -to jsonl -out - | jq -c '{task_id, exit_reason, steps}'",
		},
		Exits: []cli.Exit{
			{Code: cli.ExitOK, Meaning: "written"},
			{Code: cli.ExitFailed, Meaning: "failed while writing (nothing is left at -out)"},
			{Code: cli.ExitBadInput, Meaning: "bad input: flags, inputs (also a damaged input shard), an -out that may not be written, a selection that leaves nothing to write"},
			{Code: cli.ExitInterrupted, Meaning: "interrupted by SIGINT/SIGTERM (nothing is left at -out)"},
		},
		Setup: setupExport,
	}
}

func setupExport(f *cli.FlagSet) cli.Runner {
	e := &exportOptions{o: export.Options{Reward: export.DefaultReward}, split: "train=1",
		rows: string(hf.RowsEpisode), toolArgs: string(chat.ArgsString)}
	o := &e.o
	f.Group("input", "")
	f.Strings(&o.Inputs, "in", "DIR", "a dataset written by forkline collect (several may be exported together)").Require()
	f.String(&o.Target, "to", "TARGET", "the target: "+strings.Join(export.Targets(), ", ")).Require()
	f.String(&o.Out, "out", "DIR", "the output directory (for jsonl a FILE, or - for stdout)").Require()

	f.Group("selection", "-task fix-sum -where exit_reason=done -min-reward 1")
	f.List(&o.Tasks, "task", "ID,...", "only episodes of these tasks")
	f.List(&o.Episodes, "episode", "PREFIX,...", "only episodes whose id starts with one of these")
	f.Strings(&e.wheres, "where", "COL=V1[,V2]", "only episodes whose column has one of the values (COL!=... for none of them); columns: "+strings.Join(export.WhereColumns(), ", "))
	f.String(&e.minReward, "min-reward", "X", "only episodes whose reward is at least X (a null reward never is)")
	f.String(&o.Reward, "reward", "NAME", "the episode-level reward joined from the rewards table")

	f.Group("split", "-split train=0.95,test=0.05")
	f.String(&e.split, "split", "NAME=F,...", "named splits by episode-id hash; the fractions sum to 1")

	f.Group("target", "-to hf -rows step; -to chat-jsonl -tool-args object")
	f.String(&e.rows, "rows", "episode|step", "hf, hf-disk: one row per episode or per step")
	f.String(&e.toolArgs, "tool-args", "string|object", "chat-jsonl: tool-call arguments as a JSON string (OpenAI) or an object (templates that apply tojson)")

	f.Logging()
	f.Group("output", "")
	f.Bool(&o.Force, "force", "replace an -out that an earlier export wrote and nothing changed since (anything else is refused)")
	return func(ctx context.Context, inv *cli.Invocation) int { return runExport(ctx, inv, e) }
}

func runExport(ctx context.Context, inv *cli.Invocation, e *exportOptions) int {
	o, err := e.options(inv)
	if err != nil {
		return inv.Fail(cli.ExitBadInput, err)
	}
	var meter *progress.Meter
	if !inv.Quiet {
		opts := progress.Options{Command: "export", TTY: isTerminal(inv.Stderr)}
		if inv.LogJSON() {
			opts.Logger = inv.Logger()
		}
		meter = progress.New(inv.Stderr, opts)
		begun := false
		o.Progress = func(read, total int64) {
			if !begun {
				begun = true
				meter.Begin(total)
			}
			if read > 0 {
				meter.Advance(1)
			}
		}
	}
	rep, err := export.Run(ctx, o)
	if meter != nil {
		meter.Close() // its last line before the report
	}
	if rep != nil {
		report(inv, o, rep, err == nil)
		if inv.JSON && err == nil {
			inv.PrintJSON(rep)
		}
	}
	switch {
	case err == nil:
		return cli.ExitOK
	case errors.Is(err, context.Canceled):
		inv.Errorf("interrupted; nothing was written to %s", o.Out)
		return cli.ExitInterrupted
	case errors.Is(err, export.ErrBadInput):
		return inv.Fail(cli.ExitBadInput, err)
	default:
		return inv.Fail(cli.ExitFailed, err)
	}
}

// options parses the flags that are not Options fields and validates the
// whole, before any input is read.
func (e *exportOptions) options(inv *cli.Invocation) (export.Options, error) {
	o := e.o
	o.Stdout = inv.Stdout
	for _, w := range e.wheres {
		wh, err := export.ParseWhere(w)
		if err != nil {
			return o, fmt.Errorf("export: %w", err)
		}
		o.Where = append(o.Where, wh)
	}
	if e.minReward != "" {
		v, err := strconv.ParseFloat(e.minReward, 64)
		if err != nil {
			return o, fmt.Errorf("export: -min-reward %q is not a number", e.minReward)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			// NaN would compare false with every reward and keep them all.
			return o, fmt.Errorf("export: -min-reward %q: want a finite number", e.minReward)
		}
		o.MinReward = &v
	}
	var err error
	if o.Split, err = export.ParseSplit(e.split); err != nil {
		return o, fmt.Errorf("export: %w", err)
	}
	// -rows and -tool-args are passed on only when given, so that Validate
	// refuses them for a target that takes neither.
	if inv.Given("rows") {
		o.Rows = hf.RowsPer(e.rows)
	}
	if inv.Given("tool-args") {
		o.ToolArgs = chat.ToolArgs(e.toolArgs)
	}
	if err := o.Validate(); err != nil {
		return o, err
	}
	if inv.JSON && o.Out == "-" {
		return o, errors.New("export: -json prints on stdout, which -out - already uses")
	}
	return o, nil
}

// report prints what was read, filtered, refused and written on stderr
// (stdout may be the data): as notes, so -quiet leaves only what explains
// a failure.
func report(inv *cli.Invocation, o export.Options, r *export.Report, ok bool) {
	notes := inv.Notes()
	for _, in := range r.Inputs {
		fmt.Fprintf(notes, "export: -in %s (run %s, %s): %d episodes read, %d selected\n", in.Path, in.RunID, in.Status, in.Read, in.Selected)
	}
	if len(r.Refused) > 0 {
		w := notes
		if !ok {
			w = inv.Stderr
		}
		fmt.Fprintf(w, "export: refused by %s: %s\n", o.Target, r.RefusedText())
	}
	if !ok {
		return
	}
	var parts []string
	var total int64
	for _, p := range o.Split {
		parts = append(parts, fmt.Sprintf("%s %d", p.Name, r.Written[p.Name]))
		total += r.Written[p.Name]
	}
	fmt.Fprintf(notes, "export: %d episodes written to %s (%s), %d filtered out\n", total, o.Out, strings.Join(parts, ", "), r.Filtered)
}
