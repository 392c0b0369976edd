package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/stopguard"
	"github.com/forkline/forkline/internal/ui"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
)

// collectOptions are collect's flags: the library's Config, and the flags
// that are parsed into it.
type collectOptions struct {
	cfg         collect.Config
	reset       string
	maxLoss     string
	text        string
	captureFile string
	rollMB      int64
	rollEvery   time.Duration
	shard       string
	shardCount  int
	metricsAddr string
	llm         []llmFlag
	branch      string
}

// llmFlag is a shorthand for a -policy-opt key of -policy openai.
type llmFlag struct {
	flag, key string
	value     *string
}

func collectCommand() *cli.Command {
	return &cli.Command{
		Name:    "collect",
		Summary: "run episodes of task specs in forked sandboxes and write them as a dataset",
		About: `Builds each task's golden checkpoint once, forks replicas from it, drives every replica with the
policy, verifies the episode and streams its steps, rewards and screenshots into the dataset in -out
(manifest.json and Parquet shards). A crash loses at most the open shard generation; -resume finishes
an interrupted run without duplicating an episode (episode ids are deterministic).

The first SIGINT/SIGTERM stops scheduling and gives the episodes in flight -grace to finish; the run
ends partial and the command that finishes it is printed. A second signal exits at once.

-config FILE gives the flags from a YAML file, by their names (docs/cli.md has an example); flags on
the command line override it. The manifest records the run's resolved configuration (plan.config),
so a run is finished with "forkline collect -resume -out DIR": the other flags are read from it, and
any given beside override it (the resume check then says what may not change).`,
		Examples: []string{
			"forkline collect -tasks examples/tasks -replicas 4 -repeats 8 -out runs/demo",
			"forkline collect -tasks examples/tasks/web -provider docker -provider-opt image=forkline/chromium -out runs/web",
			"forkline collect -tasks tasks/ -policy openai -base-url http://127.0.0.1:8000/v1 -model Qwen/Qwen3-8B -out runs/rl",
			"forkline collect -tasks tasks/ -policy agent -policy-opt harness=codex -base-url http://127.0.0.1:8000/v1 -model Qwen/Qwen3-8B -out runs/codex",
			"forkline collect -config run.yaml -replicas 16",
			"forkline collect -resume -out runs/demo",
		},
		Exits: []cli.Exit{
			{Code: cli.ExitOK, Meaning: "complete: every planned episode is kept and finished (none kept as cancelled), whatever its outcome; or a resumed run was complete already (nothing to do)"},
			{Code: cli.ExitFailed, Meaning: "failed or partial for another reason (the dataset could not be written, episodes missing); the printed command finishes it once the cause is fixed"},
			{Code: cli.ExitBadInput, Meaning: "bad input: flags, task files, unknown names, an output directory holding another run, a -resume that does not match the run; nothing was changed"},
			{Code: cli.ExitLosses, Meaning: "every episode of the complete run is a scaffold loss, or -max-loss stopped the run (partial)"},
			{Code: cli.ExitUnavailable, Meaning: "a service the episodes depend on (the Docker engine, the model server) was unavailable; the run is partial and the printed command finishes it once the service is back (found before the first episode: nothing was collected, and the same command runs once it is back)"},
			{Code: cli.ExitInterrupted, Meaning: "interrupted by SIGINT/SIGTERM: running episodes were kept as cancelled, the run is partial, and the printed command finishes it"},
		},
		Setup: setupCollect,
	}
}

func setupCollect(f *cli.FlagSet) cli.Runner {
	// Every default the help shows is the library's (DefaultConfig): one
	// source for the command and an embedding program.
	d := collect.DefaultConfig()
	o := &collectOptions{cfg: d, reset: string(d.Reset), text: d.Capture.TextFlag(),
		rollMB: d.Shards.RollBytes >> 20, rollEvery: d.Shards.RollInterval}
	c := &o.cfg

	f.Group("plan", "-repeats 64 -seed 1 -shard 3/8")
	f.String(&c.Tasks, "tasks", "FILE|DIR", "task specs: a *.yaml file (it may hold several documents) or a directory of them").Require()
	f.String(&c.Out, "out", "DIR", "the dataset directory to write").Require()
	f.ConfigFlag("the run's settings from a YAML file whose keys are these flags' names (tasks: tasks/, replicas: 8, provider-opt: {image: forkline/debian}); flags on the command line override it; paths are taken from the current directory, as on the command line")
	f.Int(&c.Repeats, "repeats", "K", "episodes per task")
	f.Int64(&c.Seed, "seed", "S", "run seed; part of every episode id")
	f.String(&o.shard, "shard", "i/n", "collect only part i of n of the plan (disjoint parts, one per machine; join them with forkline merge)")
	f.Int(&o.shardCount, "shard-count", "n", "collect part JOB_COMPLETION_INDEX (Kubernetes) or SLURM_ARRAY_TASK_ID (Slurm) of n parts")

	f.Group("branching", "-branch at=2,width=4")
	f.String(&o.branch, "branch", "PLAN", "at=K,width=N: checkpoint every root episode still running after step K and continue it N times from there; every=K,width=N,depth=D,max=M: a tree, where an episode at depth d < D still running after step (d+1)*K branches again, at most M episodes per tree (N at most 256, M at most 4096; docs/branching.md); the provider must checkpoint")
	f.String(&o.cfg.From, "from", "DATASET", "branch from a stored dataset instead of running roots: its trajectories with at least K steps have their first K steps re-executed from the record (checked as replay checks them; one that does not reproduce is skipped, said so), then are continued as -branch at=K,width=N says (docs/branching.md)")
	f.List(&o.cfg.FromEpisodes, "episode", "PREFIX,...", "with -from: only the stored episodes whose id starts with one of these")

	f.Group("provider", "-provider docker -provider-opt image=forkline/chromium -replicas 8 -standby 2")
	f.String(&c.Provider, "provider", "NAME", "sandbox provider: "+strings.Join(providers.Names(), ", ")+" (docs/providers.md)")
	f.KeyValues(c.ProviderParams, "provider-opt", "key=value", "provider setting, e.g. fork=copy for local, image=forkline/debian for docker")
	f.Int(&c.Replicas, "replicas", "N", "episodes run in parallel")
	f.String(&o.reset, "reset", "auto|fork|recreate", "how a replica is reset: auto forks when the provider can checkpoint and says so loudly when it falls back to recreate")
	f.Int(&c.Standby, "standby", "K", "keep K ready replicas per task prepared in the background, so a reset is a hand-off; 0 keeps none").ShowDefault("sized to the run: up to -replicas in all, the task the plan reaches first served first")
	f.Int(&c.MaxCreates, "max-creates", "N", "at most N sandbox creations or forks at once").ShowDefault("2 × -replicas")
	f.String(&c.WorkDir, "workdir", "DIR", "where sandboxes live on the host").ShowDefault("a temporary directory")
	f.String(&c.Shell, "shell", "fresh|persistent", "how exec runs every task's commands: fresh (a shell per command) or persistent (one shell per episode: the directory, variables and jobs carry; on gvisor forks go on with setup's shell); overrides each task's shell").ShowDefault("each task's shell, else fresh")

	f.Group("policy", "-policy openai -base-url http://127.0.0.1:8000/v1 -model Qwen/Qwen3-8B -temperature 0.7 -max-tokens 1024")
	f.String(&c.Policy, "policy", "NAME", "what drives the episodes: "+strings.Join(policy.Names(), ", ")+" (docs/policies.md)")
	f.KeyValues(c.PolicyOptions, "policy-opt", "key=value", "policy setting; recorded in the manifest, so never a secret")
	f.String(&c.ScriptFile, "script", "FILE", "for -policy script: a file of actions (JSONL) replayed instead of each task's solution")
	for _, l := range llmShortcuts {
		v := new(string)
		o.llm = append(o.llm, llmFlag{flag: l.flag, key: l.key, value: v})
		f.String(v, l.flag, l.arg, "for -policy openai and agent: "+openai.OptionHelp(l.key)+" (= -policy-opt "+l.key+"=...)")
	}

	f.Group("capture", "-text cap:65536 -pixels hash -a11y none -tokens keep")
	f.String(&o.text, "text", "full|cap:N", "observation text kept per step: all of it, or at most N bytes (head and tail around a marker)")
	f.Var(&c.Capture.Pixels, "pixels", "full|hash|none", "screenshots: PNG bytes in the step row, each distinct PNG once in blobs/, or neither (size and hash only)")
	f.Var(&c.Capture.A11y, "a11y", "full|none", "accessibility trees kept or dropped")
	f.Var(&c.Capture.Tokens, "tokens", "keep|drop", "token ids, masks and logprobs kept or dropped")
	f.String(&o.captureFile, "capture", "FILE", "the whole capture policy from YAML (text, pixels, a11y, tokens); -text, -pixels, -a11y, -tokens given too override it")

	f.Group("shards", "-roll-mb 256 -roll-interval 5m")
	f.Int64(&o.rollMB, "roll-mb", "MB", "close a shard generation after about this many MB")
	f.Duration(&o.rollEvery, "roll-interval", "D", "close a shard generation at least this often: the most a crash can lose")

	f.Group("output", "-resume -max-loss 5%")
	f.Bool(&c.Resume, "resume", "finish the run in -out: run only the episodes it does not hold yet (refused, changing nothing, when the run was collected otherwise)")
	f.Bool(&c.Force, "force", "replace the run in -out (only a forkline run's own files are deleted; anything else there is refused)")
	f.String(&o.maxLoss, "max-loss", "N|F%", "stop scheduling once this invocation's scaffold losses pass N, or F % of the episodes it runs; the run ends partial (exit 3)")
	f.Duration(&c.Grace, "grace", "D", "after the first SIGINT/SIGTERM, how long episodes in flight may finish before they are cancelled")

	f.Group("monitoring", "-metrics-addr :9464 -log-format json")
	f.String(&o.metricsAddr, "metrics-addr", "HOST:PORT", "serve Prometheus metrics at http://HOST:PORT/metrics while the run goes (docs/metrics.md)")
	f.Logging()

	// -resume -out DIR reads the other flags from the run's manifest.
	f.Preset(recordedPreset)
	f.Renamed("merge", "merging is the subcommand forkline merge now: forkline merge -out DIR PART...")
	f.Renamed("tasks-from", "-tasks-from is replay's old name of -tasks")
	return func(ctx context.Context, inv *cli.Invocation) int { return runCollect(ctx, inv, o) }
}

// llmShortcuts are the flags that set one -policy-opt key each.
var llmShortcuts = []struct{ flag, key, arg string }{
	{"base-url", "base_url", "URL"},
	{"model", "model", "NAME"},
	{"api-key-env", "api_key_env", "VAR"},
	{"temperature", "temperature", "T"},
	{"max-tokens", "max_tokens", "N"},
	{"request-timeout", "timeout", "DURATION"},
	{"retries", "retries", "N"},
}

func runCollect(ctx context.Context, inv *cli.Invocation, o *collectOptions) int {
	cfg := &o.cfg
	if err := o.parse(inv); err != nil {
		return inv.Fail(cli.ExitBadInput, inFlagWords(err, collectFlags))
	}
	cfg.Recorded = recordedSettings(*cfg)
	cfg.Logger = inv.Logger()
	stopMetrics, err := watchRun(inv, o.metricsAddr, &cfg.Observer, "collect")
	if err != nil {
		return inv.Fail(cli.ExitBadInput, err)
	}
	defer stopMetrics()
	if !inv.Quiet && !inv.LogJSON() {
		cfg.Progress, cfg.ProgressTTY = progressStream(inv)
	}

	finish := resumeCommand(*cfg, inv.Quiet, inv.JSON)
	inv.OnSecondSignal(func() {
		workdir := cfg.WorkDir
		if workdir == "" {
			workdir = os.TempDir()
		}
		inv.Errorf("second signal: exiting now. Closed shards stay valid; the open generation is lost.")
		inv.Errorf("this run's sandboxes stay behind (local workspaces and their overlay mounts under %s, Docker containers):", workdir)
		inv.Errorf("the next collect run sweeps them at start-up, as the command below does. Finish the run with:\n  %s", finish)
	})
	// Signals are the command's: its canary tells the collector whether a
	// stop reached the sandboxes' processes too (internal/stopguard).
	// Without sleep(1) there is no canary, and the nil guard takes every
	// stop to reach them (the safe side).
	guard := stopguard.Start()
	defer guard.Close()
	cfg.StopGuard = guard
	sum, err := collect.Run(ctx, *cfg)
	err = inFlagWords(err, collectFlags)
	if sum != nil {
		rep := sum.Report()
		if inv.JSON {
			inv.PrintJSON(rep)
		} else {
			ui.WriteCollect(inv.Stdout, rep, cfg.Out)
		}
	}
	if err == nil {
		return cli.ExitOK
	}
	partial := sum != nil && sum.Status == string(shard.StatusPartial)
	code, how := cli.ExitFailed, "Once the cause is fixed, finish it with:"
	switch {
	case errors.Is(err, collect.ErrConfig):
		return inv.Fail(cli.ExitBadInput, err)
	case errors.Is(err, collect.ErrUnavailable):
		code, how = cli.ExitUnavailable, "Once the service is back, finish it with:"
	case errors.Is(err, context.Canceled):
		code, how = cli.ExitInterrupted, "Finish it with:"
	case errors.Is(err, collect.ErrMaxLoss), errors.Is(err, collect.ErrAllLost):
		code, how = cli.ExitLosses, "Continue it (this invocation's losses only count against -max-loss) with:"
	}
	inv.PrintError(err)
	if partial {
		inv.Errorf("the run is partial. %s\n  %s", how, finish)
	}
	return code
}

// parse turns the flags that are not Config fields into Config, checking
// every value: a refused flag changes nothing. Its errors are ready to
// print (the library's name their package, the command's own name it).
func (o *collectOptions) parse(inv *cli.Invocation) error {
	cfg := &o.cfg
	if err := checkCollectRanges(inv, o); err != nil {
		return fmt.Errorf("%s: %w", inv.Prefix(), err)
	}
	var err error
	if cfg.MaxLoss, err = collect.ParseLossLimit(o.maxLoss); err != nil {
		return err
	}
	switch {
	case o.shard != "" && inv.Given("shard-count"):
		return fmt.Errorf("%s: give -shard i/n or -shard-count n, not both", inv.Prefix())
	case o.shard != "":
		if cfg.Part, err = collect.ParsePart(o.shard); err != nil {
			return err
		}
	case inv.Given("shard-count"):
		if cfg.Part, err = collect.PartFromEnv(o.shardCount, os.Getenv); err != nil {
			return fmt.Errorf("%w (-shard-count %d; or give -shard i/n)", err, o.shardCount)
		}
	}
	if o.cfg.From != "" && inv.Given("repeats") {
		return fmt.Errorf("%s: -from %s: -repeats is not for a run from a stored dataset (each stored episode is one root)", inv.Prefix(), o.cfg.From)
	}
	if cfg.Branch, err = collect.ParseBranchPlan(o.branch); err != nil {
		return err
	}
	if err := o.applyLLM(inv); err != nil {
		return err
	}
	if cfg.Reset, err = pool.ParseStrategy(o.reset); err != nil {
		return err
	}
	if err := applyCapture(inv, &cfg.Capture, o.text, o.captureFile); err != nil {
		return err
	}
	cfg.Shards = shardConfig(o.rollMB, o.rollEvery)
	return nil
}

// applyCapture completes the capture policy the typed flags (-pixels,
// -a11y, -tokens) put in p: the -text cap, then, with -capture FILE, the
// file's policy, where a capture flag given beside the file wins. collect
// and serve take the same flags.
func applyCapture(inv *cli.Invocation, p *capture.Policy, text, file string) error {
	var err error
	if p.TextCap, err = capture.ParseText(text); err != nil {
		return err
	}
	if file == "" {
		return nil
	}
	flags := *p
	if *p, err = capture.Load(file); err != nil {
		return err
	}
	for name, apply := range map[string]func(){
		"text":   func() { p.TextCap = flags.TextCap },
		"pixels": func() { p.Pixels = flags.Pixels },
		"a11y":   func() { p.A11y = flags.A11y },
		"tokens": func() { p.Tokens = flags.Tokens },
	} {
		if inv.Given(name) {
			apply()
		}
	}
	return nil
}

// shardConfig is the shard writer's settings from -roll-mb and
// -roll-interval.
func shardConfig(rollMB int64, every time.Duration) shard.Config {
	c := shard.DefaultConfig()
	c.RollBytes = rollMB << 20
	c.RollInterval = every
	return c
}

// applyLLM copies the shorthand flags that were given into the policy
// options. They only make sense with -policy openai, and must not
// contradict a -policy-opt.
func (o *collectOptions) applyLLM(inv *cli.Invocation) error {
	cfg := &o.cfg
	for _, l := range o.llm {
		if !inv.Given(l.flag) {
			continue
		}
		if cfg.Policy != "openai" && cfg.Policy != "agent" {
			return fmt.Errorf("%s: -%s is for -policy openai and -policy agent (the policy is %q)", inv.Prefix(), l.flag, cfg.Policy)
		}
		if old, ok := cfg.PolicyOptions[l.key]; ok && old != *l.value {
			return fmt.Errorf("%s: -%s %q and -policy-opt %s=%q disagree", inv.Prefix(), l.flag, *l.value, l.key, old)
		}
		cfg.PolicyOptions[l.key] = *l.value
	}
	return nil
}

// maxRollMB keeps -roll-mb's byte count far from overflowing (1 TiB).
const maxRollMB = 1 << 20

// checkCollectRanges refuses a numeric flag outside its range, naming the
// flag, the value and the range. Flags whose zero means "the default"
// (-max-creates, -shard-count) are refused at zero only when given.
func checkCollectRanges(inv *cli.Invocation, o *collectOptions) error {
	cfg := o.cfg
	return checkRanges([]rangeCheck{
		{"replicas", fmt.Sprint(cfg.Replicas), cfg.Replicas >= 1, "an integer >= 1"},
		{"repeats", fmt.Sprint(cfg.Repeats), cfg.Repeats >= 1, "an integer >= 1"},
		{"standby", fmt.Sprint(cfg.Standby), !inv.Given("standby") || cfg.Standby >= 0, "an integer >= 0 (0: no standby; leave it out to size it to the run)"},
		{"max-creates", fmt.Sprint(cfg.MaxCreates), !inv.Given("max-creates") || cfg.MaxCreates >= 1, "an integer >= 1 (leave it out for 2 × -replicas)"},
		{"grace", cfg.Grace.String(), cfg.Grace >= 0, "a duration >= 0 (0s: cancel the episodes in flight at once)"},
		{"roll-mb", fmt.Sprint(o.rollMB), o.rollMB >= 1 && o.rollMB <= maxRollMB, fmt.Sprintf("an integer from 1 to %d", maxRollMB)},
		{"roll-interval", o.rollEvery.String(), o.rollEvery > 0, "a positive duration, e.g. 30s"},
		{"shard-count", fmt.Sprint(o.shardCount), !inv.Given("shard-count") || o.shardCount >= 1, "an integer >= 1"},
	})
}

// rangeCheck is one numeric flag's range: ok tells whether value is in it.
type rangeCheck struct {
	name, value string
	ok          bool
	want        string
}

// checkRanges returns the first check that fails as "-name value: want ...".
func checkRanges(checks []rangeCheck) error {
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("-%s %s: want %s", c.name, c.value, c.want)
		}
	}
	return nil
}
