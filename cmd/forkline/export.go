package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/formats/chat"
	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/formats/verl"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/progress"
)

type exportOptions struct {
	o           export.Options
	wheres      []string
	minReward   string
	maxReward   string
	split       string
	rows        string
	toolArgs    string
	callContent string
	reasoning   string
	advantage   string
	pairs       string
	dpoFormat   string
}

func exportCommand() *cli.Command {
	var targets []cli.Argument
	for _, n := range export.Targets() {
		t, _ := export.Describe(n)
		targets = append(targets, cli.Argument{Name: n, Usage: exportFlags.words(t.Summary) + " → " + t.Layout})
	}
	return &cli.Command{
		Name:    "export",
		Summary: "convert datasets into trainer formats: verl, Hugging Face, TRL/OpenAI JSONL",
		About: `Reads one or more datasets (every shard checked against its manifest's sha256 first), selects
episodes (-task, -episode, -where, -min-reward, -max-reward: all must hold), assigns each to a
split by a hash of its episode id (so it stays in its split across exports), joins the reward named -reward and writes
the target. Output is built in a hidden sibling directory and renamed into place; an existing -out is
replaced only with -force, and only when an earlier export wrote it. The same inputs and flags give
the same bytes.

Conversations are the ones the model had: its tool calls as it wrote them (every one, the done call
included), the tools in the order it was sent them, the observations as the policy showed them
(aci.ObservationText), each message with exactly its own keys. SFT targets export every selected
episode, failed ones too (the count is printed): add -min-reward 1 to train only on successes.
A split that gets nothing is not written: datasets and verl cannot load an empty one.`,
		Sections: []cli.Section{{Title: "targets", Entries: targets}},
		Examples: []string{
			"forkline export -in runs/demo -to hf -out out/hf -split train=0.95,test=0.05 -where exit_reason=done",
			"forkline export -in runs/rl -to verl-agent -out out/verl -advantage grpo -max-prompt-tokens 4096",
			"forkline export -in runs/rl -to dpo -out out/dpo -pairs all",
			"forkline export -in runs/demo -to chat-jsonl -out out/openai -tool-args string -reasoning none",
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
		rows: "episode", toolArgs: string(model.ArgsObject), callContent: string(model.ContentEmpty), reasoning: string(model.ReasoningShown),
		advantage: string(verl.AdvantageNone), pairs: string(export.PairsMax), dpoFormat: string(chat.DPOTRL)}
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
	f.String(&e.maxReward, "max-reward", "X", "only episodes whose reward is at most X (a null reward never is)")
	f.String(&o.Reward, "reward", "NAME", "the episode-level reward joined from the rewards table")

	f.Group("split", "-split train=0.95,test=0.05")
	f.String(&e.split, "split", "NAME=F,...", "named splits by episode-id hash; the fractions sum to 1")

	f.Group("rows", "-to hf -rows step; -to verl-agent -rows turn")
	f.String(&e.rows, "rows", "ROWS", "what a row is: hf, hf-disk episode|step; verl-agent, sft-tokens episode|turn (a model turn: its prompt and response ids as the server reported them, usable when an episode's history drifted)")

	f.Group("conversation", "-tool-args string -call-content split (DeepSeek-V3); -tool-args string -reasoning none (OpenAI)")
	f.String(&e.toolArgs, "tool-args", "object|string", "chat-jsonl, dpo, hf, hf-disk, verl-sft: tool-call arguments as an object (Qwen, Llama templates apply tojson) or as the string the model wrote (OpenAI, DeepSeek-V3)")
	f.String(&e.callContent, "call-content", "empty|null|split", "content of an assistant message with only tool calls: \"\" (Qwen, Llama) or null; split also writes a message with text and calls as the text, then the calls with null (DeepSeek-V3, whose template renders calls only beside null content)")
	f.String(&e.reasoning, "reasoning", "shown|all|none", "which turns keep the model's reasoning: where the model saw it (the last turn, unless the policy sent reasoning back), every turn, or none")

	f.Group("verl-agent", "-advantage grpo -max-prompt-tokens 4096 -max-response-tokens 8192")
	f.String(&e.advantage, "advantage", "none|grpo|rloo", "reward_score: the reward, or its group advantage as verl's GRPO/RLOO compute it over the episode's group (replicas of one task, golden state and prompt), so verl trains groups with rollout.n=1")
	f.Int(&e.o.MaxPromptTokens, "max-prompt-tokens", "N", "refuse rows whose prompt is longer (verl's rollout.prompt_length); 0: no limit")
	f.Int(&e.o.MaxResponseTokens, "max-response-tokens", "N", "refuse rows whose response is longer (rollout.response_length); 0: no limit")

	f.Group("dpo", "-to dpo -pairs all -dpo-format openai")
	f.String(&e.pairs, "pairs", "max|all", "pairs per group (the same task, golden state and prompt): its best episode over its worst, or every two whose rewards differ")
	f.String(&e.dpoFormat, "dpo-format", "trl|openai", "TRL's prompt/chosen/rejected, or OpenAI's input/preferred_output/non_preferred_output")

	f.Group("dataset card", "-license apache-2.0 -task-category text-generation -language en")
	f.String(&e.o.License, "license", "ID", "hf, hf-disk, sft-tokens: the card's license (a Hub license id)")
	f.List(&e.o.TaskCategories, "task-category", "NAME,...", "hf, sft-tokens: the card's task_categories")
	f.List(&e.o.Languages, "language", "CODE,...", "hf, sft-tokens: the card's language")

	f.Logging()
	f.Group("output", "")
	f.Bool(&o.Force, "force", "replace an -out that an earlier export wrote and nothing changed since (anything else is refused)")
	return func(ctx context.Context, inv *cli.Invocation) int { return runExport(ctx, inv, e) }
}

func runExport(ctx context.Context, inv *cli.Invocation, e *exportOptions) int {
	o, err := e.options(inv)
	if err != nil {
		return inv.Fail(cli.ExitBadInput, inFlagWords(err, exportFlags))
	}
	var meter *progress.Meter
	if !inv.Quiet {
		var opts progress.Options
		var w io.Writer
		if inv.LogJSON() {
			opts, w = progress.Options{Command: "export", Logger: inv.Logger()}, inv.Stderr
		} else {
			var tty bool
			w, tty = progressStream(inv)
			opts = progress.Options{Command: "export", TTY: tty}
		}
		meter = progress.New(w, opts)
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
	if info, err := export.Describe(o.Target); err == nil && !info.Columnar {
		defer exportGC()()
	}
	rep, err := export.Run(ctx, o)
	err = inFlagWords(err, exportFlags)
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
			return o, err
		}
		o.Where = append(o.Where, wh)
	}
	if e.minReward != "" {
		v, err := parseReward("export", "min-reward", e.minReward)
		if err != nil {
			return o, err
		}
		o.MinReward = v
	}
	if e.maxReward != "" {
		v, err := parseReward("export", "max-reward", e.maxReward)
		if err != nil {
			return o, err
		}
		o.MaxReward = v
	}
	var err error
	if o.Split, err = export.ParseSplit(e.split); err != nil {
		return o, err
	}
	// Target options are passed on only when given, so that Validate
	// refuses one given to a target that does not take it.
	if inv.Given("rows") {
		o.Rows = e.rows
	}
	if inv.Given("tool-args") {
		o.ToolArgs = model.ArgsEncoding(e.toolArgs)
	}
	if inv.Given("call-content") {
		o.CallContent = model.CallContent(e.callContent)
	}
	if inv.Given("reasoning") {
		o.Reasoning = model.Reasoning(e.reasoning)
	}
	if inv.Given("advantage") {
		o.Advantage = verl.Advantage(e.advantage)
	}
	if inv.Given("pairs") {
		o.Pairs = export.Pairs(e.pairs)
	}
	if inv.Given("dpo-format") {
		o.DPOFormat = chat.DPOFormat(e.dpoFormat)
	}
	if err := o.Validate(); err != nil {
		return o, err
	}
	if inv.JSON && o.Out == "-" {
		return o, errors.New("export: -json prints on stdout, which -out - already uses")
	}
	return o, nil
}

// sftTarget names the targets a trainer fits to every row (so failed
// episodes are worth a note).
var sftTarget = map[string]bool{"chat-jsonl": true, "hf": true, "hf-disk": true, "verl-sft": true, "sft-tokens": true}

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
	var parts, empty []string
	var total int64
	for _, p := range o.Split {
		parts = append(parts, fmt.Sprintf("%s %d", p.Name, r.Written[p.Name]))
		total += r.Written[p.Name]
		if r.Written[p.Name] == 0 && len(o.Split) > 1 {
			empty = append(empty, p.Name)
		}
	}
	unit := r.Unit
	if total == 1 {
		unit = strings.TrimSuffix(unit, "s") // "1 pair", "1 episode"
	}
	fmt.Fprintf(notes, "export: %d %s written to %s (%s), %d filtered out\n", total, unit, o.Out, strings.Join(parts, ", "), r.Filtered)
	if len(empty) > 0 {
		fmt.Fprintf(notes, "export: split %s got nothing and is not written (an empty split does not load in datasets or verl)\n", strings.Join(empty, ", "))
	}
	if r.Unsuccessful > 0 && sftTarget[o.Target] {
		fmt.Fprintf(notes, "export: %d of the %d episodes written did not end in done or have a reward below 1 (or none); SFT trains on them too: add -min-reward 1 to keep only successes\n", r.Unsuccessful, total)
	}
}

// parseReward reads -min-reward or -max-reward (flag) for export and
// inspect -list: a finite number.
func parseReward(command, flag, s string) (*float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("%s: -%s %q is not a number", command, flag, s)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		// NaN would compare false with every reward and keep them all.
		return nil, fmt.Errorf("%s: -%s %q: want a finite number", command, flag, s)
	}
	return &v, nil
}

// exportGC sets the garbage collector for an export to a target that
// writes lines (export.TargetInfo.Columnar false) and returns what puts it
// back. Such an export's live heap is tens of MB while it allocates
// gigabytes on the way, so the default (a collection each time the heap
// doubles) spent a fifth of a chat-jsonl export's CPU marking the same
// small heap. It collects when the heap has grown 4× instead, with a soft
// limit of 256 MiB that makes it collect sooner rather than grow past it.
// The columnar targets keep the default: their live heap (a batch being
// built and one being encoded, 100–200 MB) sits near such a limit, and
// what they would save is small against the memory it costs: verl-sft of
// 1,000,000 episodes took 36–39 s of CPU at a 196 MB peak with the
// default, 35 s at 279 MB with GOGC 400 and the 256 MiB limit, 36 s at
// 426 MB with a 1 GiB limit.
// GOGC or GOMEMLIMIT in the environment are the user's choice and are
// kept.
func exportGC() (restore func()) {
	gc, limit := -2, int64(-2)
	if os.Getenv("GOGC") == "" {
		gc = debug.SetGCPercent(exportGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		limit = debug.SetMemoryLimit(exportMemoryLimit)
	}
	return func() {
		if gc != -2 {
			debug.SetGCPercent(gc)
		}
		if limit != -2 {
			debug.SetMemoryLimit(limit)
		}
	}
}

// What exportGC sets.
const (
	exportGCPercent   = 400
	exportMemoryLimit = 256 << 20
)
