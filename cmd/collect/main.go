// Command collect runs a collection: it builds a golden checkpoint per task,
// forks replicas from it, drives them with a policy and writes a native
// dataset (manifest.json + Parquet shards).
//
//	collect -tasks examples/tasks -replicas 4 -repeats 4 -out runs/demo
//
// Exit codes:
//
//	0    the run is complete (every planned episode is kept, whatever its
//	     outcome), or a resumed run was complete already (nothing to do)
//	1    the run failed or ended partial for another reason (the dataset
//	     could not be written, episodes missing); -resume finishes it once
//	     the cause is fixed
//	2    bad input: flags, task files, unknown names, an occupied output
//	     directory, a resume that does not match the run; nothing was changed
//	3    scaffold losses: every episode of the (complete) run is a scaffold
//	     loss, or -max-loss stopped the run (partial; -resume continues it)
//	4    a service the episodes depend on (the sandbox backend, the model
//	     server) was unavailable: the episodes it ended were not kept, the
//	     run is partial, and -resume runs them once it is back
//	130  interrupted by SIGINT/SIGTERM: running episodes were kept as cancelled,
//	     the manifest says partial, and -resume finishes the run
//
// When a run ends partial, the command that finishes it is printed, with
// every setting that matters to its episodes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"

	_ "github.com/forkline/forkline/providers/all" // registers every backend
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitBadInput    = 2
	exitLosses      = 3
	exitUnavailable = 4
	exitCancelled   = 130
)

func main() { os.Exit(run(os.Args[1:])) }

// kv collects repeated -provider-opt key=value flags.
type kv map[string]string

func (m kv) String() string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k+"="+m[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (m kv) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	m[k] = v
	return nil
}

func run(args []string) int {
	fs := flag.NewFlagSet("collect", flag.ContinueOnError)
	cfg := collect.Config{ProviderParams: map[string]string{}}
	fs.StringVar(&cfg.Tasks, "tasks", "", "task spec `FILE` or directory of *.yaml specs (required)")
	fs.StringVar(&cfg.Out, "out", "", "output dataset `DIR` (required)")
	fs.StringVar(&cfg.Provider, "provider", "local", "sandbox provider: "+strings.Join(providers.Names(), ", "))
	fs.Var(kv(cfg.ProviderParams), "provider-opt", "provider setting `key=value` (repeatable), e.g. fork=copy for local")
	fs.IntVar(&cfg.Replicas, "replicas", 4, "episodes run in parallel")
	fs.IntVar(&cfg.Repeats, "repeats", 1, "episodes per task")
	fs.Int64Var(&cfg.Seed, "seed", 0, "run seed; part of every episode id")
	fs.StringVar(&cfg.Policy, "policy", "script", "policy: "+strings.Join(policy.Names(), ", "))
	cfg.PolicyOptions = map[string]string{}
	fs.Var(kv(cfg.PolicyOptions), "policy-opt", "policy setting `key=value` (repeatable; recorded in the manifest, so never a secret)")
	fs.StringVar(&cfg.ScriptFile, "script", "", "for -policy script: a `FILE` of actions (JSONL) to replay instead of each task's solution")
	// BEGIN openai policy flags
	llm := addLLMFlags(fs)
	// END openai policy flags
	reset := fs.String("reset", "auto", "reset strategy: auto, fork, recreate")
	fs.IntVar(&cfg.Standby, "standby", 0, "keep `K` ready replicas per task prepared in the background, so a reset is a hand-off")
	fs.IntVar(&cfg.MaxCreates, "max-creates", 0, "at most `N` sandbox creations/forks at once (default 2 × replicas)")
	maxLoss := fs.String("max-loss", "", "stop scheduling once this invocation's scaffold losses pass `N|F%` (a count, or a percentage of the episodes to run); the run ends partial and -resume continues it")
	fs.DurationVar(&cfg.Grace, "grace", 10*time.Second, "after the first SIGINT/SIGTERM, how long episodes in flight may finish before they are cancelled")
	fs.BoolVar(&cfg.Resume, "resume", false, "finish the run in -out, skipping episodes it already kept")
	fs.BoolVar(&cfg.Force, "force", false, "replace the run in -out")
	fs.StringVar(&cfg.WorkDir, "workdir", "", "where sandboxes live on the host (default: a temporary directory)")
	text := fs.String("text", "full", "capture: observation text, full or cap:N bytes")
	fs.StringVar(&cfg.Capture.Pixels, "pixels", "hash", "capture: screenshots full, hash (stored once in blobs/) or none")
	fs.StringVar(&cfg.Capture.A11y, "a11y", "full", "capture: accessibility trees full or none")
	fs.StringVar(&cfg.Capture.Tokens, "tokens", "keep", "capture: token ids, masks and logprobs keep or drop")
	captureFile := fs.String("capture", "", "capture: the whole policy from a YAML `FILE` (text, pixels, a11y, tokens); -text, -pixels, -a11y, -tokens given too override it")
	rollMB := fs.Int64("roll-mb", 64, "close a shard generation after about this many MB")
	rollEvery := fs.Duration("roll-interval", time.Minute, "close a shard generation at least this often (bounds what a crash can lose)")
	shardFlag := fs.String("shard", "", "collect only part `i/n` of the plan (n machines, disjoint parts; join them with -merge)")
	shardCount := fs.Int("shard-count", 0, "collect part JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID of `n` parts")
	merge := fs.Bool("merge", false, "merge the datasets given as arguments (parts of one plan) into -out, then exit")
	quiet := fs.Bool("quiet", false, "no progress output")
	jsonOut := fs.Bool("json", false, "print the summary as JSON on stdout")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: collect -tasks DIR|FILE -out DIR [flags]\n       collect -merge -out DIR PART_DIR...\n\n"+
			"Exit codes: 0 complete (or nothing to do), 1 failed or partial, 2 bad input (nothing changed),\n"+
			"3 every episode a scaffold loss or -max-loss passed, 4 a service unavailable (resume later), 130 interrupted.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitBadInput
	}
	if *merge {
		return runMerge(cfg.Out, fs.Args(), *jsonOut)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "collect: unexpected arguments %q\n", fs.Args())
		return exitBadInput
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := checkRanges(fs, given, cfg, *rollMB, *rollEvery, *shardCount); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitBadInput
	}
	var err error
	if cfg.MaxLoss, err = collect.ParseLossLimit(*maxLoss); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitBadInput
	}
	switch {
	case *shardFlag != "" && given["shard-count"]:
		fmt.Fprintln(os.Stderr, "collect: give -shard i/n or -shard-count n, not both")
		return exitBadInput
	case *shardFlag != "":
		p, err := collect.ParsePart(*shardFlag)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return exitBadInput
		}
		cfg.Part = p
	case given["shard-count"]:
		p, err := collect.PartFromEnv(*shardCount, os.Getenv)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return exitBadInput
		}
		cfg.Part = p
	}
	// BEGIN openai policy options
	if err = llm.apply(fs, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitBadInput
	}
	// END openai policy options
	if cfg.Reset, err = pool.ParseStrategy(*reset); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitBadInput
	}
	if cfg.Capture.TextCap, err = capture.ParseText(*text); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitBadInput
	}
	if *captureFile != "" {
		flags := cfg.Capture
		if cfg.Capture, err = collect.LoadCapture(*captureFile); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return exitBadInput
		}
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "text":
				cfg.Capture.TextCap = flags.TextCap
			case "pixels":
				cfg.Capture.Pixels = flags.Pixels
			case "a11y":
				cfg.Capture.A11y = flags.A11y
			case "tokens":
				cfg.Capture.Tokens = flags.Tokens
			}
		})
	}
	cfg.Shards = shard.DefaultConfig()
	cfg.Shards.RollBytes = *rollMB << 20
	cfg.Shards.RollInterval = *rollEvery
	cfg.Log = os.Stderr
	if !*quiet {
		cfg.Progress = os.Stderr
		cfg.ProgressTTY = isTerminal(os.Stderr)
	}

	finish := resumeCommand(cfg, *quiet, *jsonOut)
	ctx, stop := withSignals(func() {
		workdir := cfg.WorkDir
		if workdir == "" {
			workdir = os.TempDir()
		}
		fmt.Fprintf(os.Stderr, "collect: second signal: exiting now. Closed shards stay valid; the open generation is lost.\n"+
			"collect: this run's sandboxes stay behind (local workspaces and their overlay mounts under %s, Docker containers):\n"+
			"collect: the next collect run sweeps them at start-up, as the command below does. Finish the run with:\n  %s\n", workdir, finish)
	})
	defer stop()
	sum, err := collect.Run(ctx, cfg)
	if sum != nil {
		rep := sum.Report()
		if *jsonOut {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			enc.Encode(rep)
		} else {
			rep.Print(os.Stdout, cfg.Out)
		}
	}
	if err == nil {
		return exitOK
	}
	partial := sum != nil && sum.Status == string(shard.StatusPartial)
	code, how := exitFailed, "Once the cause is fixed, finish it with:"
	switch {
	case errors.Is(err, collect.ErrConfig):
		fmt.Fprintln(os.Stderr, err)
		return exitBadInput
	case errors.Is(err, collect.ErrUnavailable):
		code, how = exitUnavailable, "Once the service is back, finish it with:"
	case errors.Is(err, context.Canceled):
		code, how = exitCancelled, "Finish it with:"
	case errors.Is(err, collect.ErrMaxLoss), errors.Is(err, collect.ErrAllLost):
		code, how = exitLosses, "Continue it (this invocation's losses only count against -max-loss) with:"
	}
	fmt.Fprintln(os.Stderr, err)
	if partial {
		fmt.Fprintf(os.Stderr, "collect: the run is partial. %s\n  %s\n", how, finish)
	}
	return code
}

// runMerge joins parts into out.
func runMerge(out string, parts []string, asJSON bool) int {
	if out == "" || len(parts) == 0 {
		fmt.Fprintln(os.Stderr, "collect: -merge needs -out DIR and the part directories as arguments")
		return exitBadInput
	}
	ctx, stop := withSignals(nil)
	defer stop()
	rep, err := collect.Merge(ctx, out, parts, shard.DefaultConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, collect.ErrMerge) {
			return exitBadInput
		}
		return exitFailed
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		fmt.Printf("forkline merge: %s — %d episodes from %d parts into %s\n", rep.Status, rep.Episodes, len(rep.Parts), out)
		for _, p := range rep.Parts {
			fmt.Printf("  %-40s part %s  %-8s %d episodes\n", p.Dir, p.Part, p.Status, p.Episodes)
		}
		if len(rep.Missing) > 0 {
			fmt.Printf("  missing parts: %v\n", rep.Missing)
		}
	}
	if rep.Status != shard.StatusComplete {
		return exitFailed
	}
	return exitOK
}

// withSignals returns a context cancelled by the first SIGINT or SIGTERM:
// running episodes end as cancelled, shards close, the manifest says partial.
// A second signal calls onSecond and exits at once; closed shards stay valid
// and only the open generation is lost.
func withSignals(onSecond func()) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s, ok := <-ch
		if !ok {
			return
		}
		fmt.Fprintf(os.Stderr, "\ncollect: %v: stopping (signal again to stop at once)\n", s)
		cancel()
		if _, ok := <-ch; ok {
			if onSecond != nil {
				onSecond()
			} else {
				fmt.Fprintln(os.Stderr, "collect: second signal: exiting now")
			}
			os.Exit(exitCancelled)
		}
	}()
	return ctx, func() { signal.Stop(ch); close(ch); cancel() }
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// BEGIN openai policy helpers

// llmFlags are shorthands for -policy-opt keys of -policy openai; each fills
// the option of the same meaning (see policy/openai.OptionNames).
type llmFlags struct {
	flags []struct{ flag, key string }
	vals  map[string]*string
}

func addLLMFlags(fs *flag.FlagSet) *llmFlags {
	l := &llmFlags{vals: map[string]*string{}}
	for _, f := range []struct{ flag, key, arg string }{
		{"base-url", "base_url", "`URL`"},
		{"model", "model", "`NAME`"},
		{"api-key-env", "api_key_env", "`VAR`"},
		{"temperature", "temperature", "`T`"},
		{"max-tokens", "max_tokens", "`N`"},
		{"request-timeout", "timeout", "`DURATION`"},
		{"retries", "retries", "`N`"},
	} {
		l.flags = append(l.flags, struct{ flag, key string }{f.flag, f.key})
		l.vals[f.key] = fs.String(f.flag, "", "for -policy openai: "+f.arg+": "+openai.OptionHelp(f.key)+" (= -policy-opt "+f.key+"=...)")
	}
	return l
}

// apply copies the flags that were given into cfg.PolicyOptions. They only
// make sense with -policy openai, and must not contradict a -policy-opt.
func (l *llmFlags) apply(fs *flag.FlagSet, cfg *collect.Config) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, f := range l.flags {
		if !given[f.flag] {
			continue
		}
		if cfg.Policy != "openai" {
			return fmt.Errorf("collect: -%s is for -policy openai (the policy is %q)", f.flag, cfg.Policy)
		}
		v := *l.vals[f.key]
		if old, ok := cfg.PolicyOptions[f.key]; ok && old != v {
			return fmt.Errorf("collect: -%s %q and -policy-opt %s=%q disagree", f.flag, v, f.key, old)
		}
		cfg.PolicyOptions[f.key] = v
	}
	return nil
}

// END openai policy helpers
