// Command export converts native forkline datasets into the formats
// trainers load.
//
//	export -in runs/demo -to verl-agent -out out/verl -split train=0.95,test=0.05
//	export -in runs/a -in runs/b -to hf -rows step -out out/hf -where exit_reason=done
//	export -in runs/demo -to jsonl -out - | jq .exit_reason
//
// Targets and their output:
//
//	jsonl       FILE or -                 every native column, one episode per line (one split only)
//	verl-agent  DIR/<split>.parquet       verl AgentLoopOutput token rows + RLHFDataset prompt columns;
//	                                      episodes without a token record are refused and counted
//	verl-rl     DIR/<split>.parquet       verl RLHFDataset prompts: data_source, prompt, ability,
//	                                      reward_model, extra_info (index)
//	verl-sft    DIR/<split>.parquet       verl MultiTurnSFTDataset: messages, tools, enable_thinking
//	hf          DIR/README.md             dataset card (configs, dataset_info)
//	            DIR/data/<split>-NNNNN-of-MMMMM.parquet
//	hf-disk     DIR/dataset_dict.json     datasets' save_to_disk layout
//	            DIR/<split>/data-NNNNN-of-MMMMM.arrow, state.json, dataset_info.json
//	chat-jsonl  DIR/<split>.jsonl         OpenAI/TRL chat fine-tuning lines
//
// Every split named by -split gets its file(s), empty or not. A directory
// target is built in a hidden sibling directory and renamed into place when
// complete; an export killed midway leaves that directory, and the next
// export into the same place deletes it. -out must be missing (or an empty
// directory); -force replaces it only when it is an earlier export's
// output, unchanged since. An -out that is, contains or lies inside an -in
// is refused. Exports stream one episode at a time and are deterministic:
// the same inputs and flags give the same bytes (no output holds a
// timestamp). Every input shard is checked against its manifest's sha256
// before it is read.
//
// Selection: -task and -where (repeatable; AND between flags, OR between
// comma-separated values), -min-reward (episodes with a null reward never
// pass). The reward is the episode-level reward row named -reward. Splits
// are assigned by the first 8 bytes of sha256(episode_id), so an episode
// stays in its split across exports.
//
// The user message is the task's instruction from the run's manifest. From
// the run's recorded policy options come the system prompt (system_prompt
// or system), enable_thinking, the tools offered (actions), text tool calls
// (tool_mode=text) and the observation cap (observation_cap); tool messages
// are the observations as aci.ObservationText shows them to a model.
//
// Exit codes: 0 written, 1 failed, 2 bad input (flags, inputs, a damaged
// input shard, an -out that may not be written, a selection that leaves
// nothing to write), 130 interrupted (nothing is left at -out).
//
// The export itself is package export; this command parses the flags into
// export.Options, runs export.Run and maps its error to the exit code.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/formats/chat"
	"github.com/forkline/forkline/formats/hf"
)

// Exit codes.
const (
	exitOK        = 0
	exitFailed    = 1
	exitBadInput  = 2
	exitCancelled = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// strs collects a repeatable string flag.
type strs []string

func (s *strs) String() string     { return strings.Join(*s, ",") }
func (s *strs) Set(v string) error { *s = append(*s, v); return nil }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var inputs, wheres, tasks strs
	fs.Var(&inputs, "in", "native dataset `DIR` written by collect (required; repeatable)")
	to := fs.String("to", "", "target: "+strings.Join(export.Targets(), ", ")+" (required)")
	out := fs.String("out", "", "output `DIR` (a FILE or - for jsonl) (required)")
	force := fs.Bool("force", false, "replace an existing -out that an earlier export wrote (and nothing else)")
	fs.Var(&wheres, "where", "keep episodes whose `column=v1[,v2]` (or column!=...) matches; repeatable, all must hold; columns: "+strings.Join(export.WhereColumns(), ", "))
	minReward := fs.String("min-reward", "", "keep episodes whose reward is at least `X` (a null reward never is)")
	fs.Var(&tasks, "task", "keep episodes of task `ID` (repeatable)")
	rewardName := fs.String("reward", export.DefaultReward, "the episode-level reward `NAME` joined from the rewards table")
	split := fs.String("split", "train=1", "`name=fraction,...` by episode-id hash, e.g. train=0.95,test=0.05")
	rows := fs.String("rows", string(hf.RowsEpisode), "hf, hf-disk: one row per `episode|step`")
	toolArgs := fs.String("tool-args", string(chat.ArgsString), "chat-jsonl: tool-call arguments as a JSON `string|object`")
	jsonOut := fs.Bool("json", false, "print the summary as JSON on stdout (not with -out -)")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: export -in RUN [-in RUN2 ...] -to TARGET -out DIR [flags]\n\nTargets:\n")
		for _, n := range export.Targets() {
			t, _ := export.Describe(n)
			fmt.Fprintf(w, "  %-11s %s\n  %-11s   -> %s\n", n, t.Summary, "", t.Layout)
		}
		fmt.Fprintf(w, "\nExit codes: 0 written, 1 failed, 2 bad input, 130 interrupted.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitBadInput
	}
	fail := func(err error) int { fmt.Fprintln(stderr, err); return exitBadInput }
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("export: unexpected arguments %q", fs.Args()))
	}
	if len(inputs) == 0 || *out == "" || *to == "" {
		return fail(errors.New("export: -in, -to and -out are required (see -h)"))
	}
	o := export.Options{Inputs: inputs, Target: *to, Out: *out, Force: *force, Stdout: stdout, Tasks: tasks, Reward: *rewardName}
	for _, w := range wheres {
		wh, err := export.ParseWhere(w)
		if err != nil {
			return fail(fmt.Errorf("export: %w", err))
		}
		o.Where = append(o.Where, wh)
	}
	if *minReward != "" {
		v, err := strconv.ParseFloat(*minReward, 64)
		if err != nil {
			return fail(fmt.Errorf("export: -min-reward %q is not a number", *minReward))
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			// NaN would compare false with every reward and keep them all.
			return fail(fmt.Errorf("export: -min-reward %q: want a finite number", *minReward))
		}
		o.MinReward = &v
	}
	var err error
	if o.Split, err = export.ParseSplit(*split); err != nil {
		return fail(fmt.Errorf("export: %w", err))
	}
	// -rows and -tool-args are passed on only when given, so that Validate
	// refuses them for a target that takes neither.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "rows":
			o.Rows = hf.RowsPer(*rows)
		case "tool-args":
			o.ToolArgs = chat.ToolArgs(*toolArgs)
		}
	})
	if err := o.Validate(); err != nil {
		return fail(err)
	}
	if *jsonOut && *out == "-" {
		return fail(errors.New("export: -json prints on stdout, which -out - already uses"))
	}

	rep, err := export.Run(ctx, o)
	if rep != nil {
		report(stderr, o, rep, err == nil)
		if *jsonOut && err == nil {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.Encode(rep)
		}
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "export: interrupted; nothing was written to", o.Out)
		return exitCancelled
	case errors.Is(err, export.ErrBadInput):
		fmt.Fprintln(stderr, err)
		return exitBadInput
	default:
		fmt.Fprintln(stderr, err)
		return exitFailed
	}
}

// report prints the summary: what was read, filtered, refused and written.
func report(w io.Writer, o export.Options, r *export.Report, ok bool) {
	for _, in := range r.Inputs {
		fmt.Fprintf(w, "export: -in %s (run %s, %s): %d episodes read, %d selected\n", in.Path, in.RunID, in.Status, in.Read, in.Selected)
	}
	if len(r.Refused) > 0 {
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
	fmt.Fprintf(w, "export: %d episodes written to %s (%s), %d filtered out\n", total, o.Out, strings.Join(parts, ", "), r.Filtered)
}
