package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/progress"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/docker"
	"github.com/forkline/forkline/replay"
	"github.com/forkline/forkline/runtime"
)

type replayOptions struct {
	cfg         replay.Config
	mode        string
	masks       []string
	report      string
	metricsAddr string
}

func replayCommand() *cli.Command {
	var masks []cli.Argument
	for _, m := range replay.DefaultMasks {
		masks = append(masks, cli.Argument{Name: m.Name, Usage: m.Pattern.String() + " → " + m.Replace})
	}
	return &cli.Command{
		Name:    "replay",
		Summary: "re-run a dataset's episodes, compare every observation, report where they diverge",
		About: `Rebuilds each task's golden state from the specs the dataset recorded (or from -tasks, to test a
changed task), forks replicas, re-executes every episode's recorded actions in order and compares
each new observation with the recorded one: exit code, error and timeout flags always, the output as
-compare says, screenshots by hash (or within -pixel-tolerance). For each diverged episode it prints
the first divergent step with a line diff and whether the verification reward changed. Usable as a
CI gate for a new image, provider or forkline version.

An agent harness's episode (-policy agent) has no actions of forkline's to re-execute: its harness
runs again in the fork (installed here, forkline images -agent), each model call answered with the
recorded reply, and the tool results it sends back are the observations compared; the model
server is not asked (docs/agents.md).`,
		Sections: []cli.Section{{Title: "default masks (-compare normalized)", Entries: masks}},
		Examples: []string{
			"forkline replay -in runs/demo",
			"forkline replay -in runs/demo -tasks examples/tasks -compare normalized -report diff.json",
			"forkline replay -in runs/demo -provider docker -report diff.html -out runs/demo-on-docker",
		},
		Exits: []cli.Exit{
			{Code: cli.ExitOK, Meaning: "every replayed episode is identical"},
			{Code: cli.ExitFailed, Meaning: "at least one episode diverged, or could not be replayed (its golden setup fails, its sandbox died); the report says which"},
			{Code: cli.ExitBadInput, Meaning: "bad input: flags, a dataset that cannot be read, filters or -tasks that match none of its tasks, a provider that cannot be opened"},
			{Code: cli.ExitUnavailable, Meaning: "the sandbox backend (the Docker engine) was unavailable"},
			{Code: cli.ExitInterrupted, Meaning: "interrupted by SIGINT/SIGTERM"},
		},
		Setup: setupReplay,
	}
}

func setupReplay(f *cli.FlagSet) cli.Runner {
	d := replay.DefaultConfig() // the defaults the help shows
	o := &replayOptions{cfg: d, mode: string(d.Mode)}
	c := &o.cfg
	f.Group("input", "")
	f.String(&c.In, "in", "DIR", "the dataset to replay").Require()

	f.Group("tasks", "-tasks examples/tasks -task fix-sum -episode 7ff7,9713")
	f.String(&c.TaskFiles, "tasks", "FILE|DIR", "replay with these task specs instead of the recorded ones (the same task ids; e.g. a changed setup)")
	f.List(&c.Tasks, "task", "ID,...", "only episodes of these tasks")
	f.List(&c.EpisodeIDs, "episode", "PREFIX,...", "only episodes whose id starts with one of these")

	f.Group("provider", "-provider docker -provider-opt image=forkline/debian -replicas 8")
	f.String(&c.Provider, "provider", "NAME", "the provider to replay on: "+strings.Join(providers.Names(), ", ")).ShowDefault("the one the dataset was collected with")
	f.KeyValues(c.ProviderParams, "provider-opt", "key=value", "provider setting (docs/providers.md)")
	f.String(&c.Image, "image", "NAME", "replace every task's image (docker)")
	f.Int(&c.Replicas, "replicas", "N", "episodes replayed in parallel")
	f.String(&c.WorkDir, "workdir", "DIR", "where sandboxes live on the host").ShowDefault("a temporary directory")

	f.Group("compare", `-compare normalized -mask 'pid=\bpid \d+' -pixel-tolerance 0.01`)
	f.String(&o.mode, "compare", "exact|normalized|hash", "how outputs are compared: as recorded; with ANSI escapes, trailing whitespace and the masks' matches replaced (by default dates and times, sandbox paths, long hex ids); or by sha256")
	f.Strings(&o.masks, "mask", "NAME=REGEX", "one more mask for -compare normalized; -mask none drops the default masks")
	f.Float64(&c.PixelTolerance, "pixel-tolerance", "F", "screenshots match when at most this fraction of their pixels differ (0: compare by hash)")

	f.Group("output", "-report diff.html -out runs/replayed")
	f.String(&o.report, "report", "FILE", "also write the report: FILE.json as JSON, FILE.html as one self-contained page with screenshots side by side")
	f.String(&c.Record, "out", "DIR", "write the replayed episodes as a new dataset (same episode ids, replayed observations and rewards)")

	f.Group("monitoring", "-metrics-addr :9464 -log-format json")
	f.String(&o.metricsAddr, "metrics-addr", "HOST:PORT", "serve Prometheus metrics at http://HOST:PORT/metrics while the replay goes (docs/metrics.md)")
	f.Logging()

	f.Renamed("tasks-from", "-tasks-from is now -tasks (task specs); select tasks by id with -task ID,...")
	f.Renamed("episodes", "-episodes is now -episode PREFIX,...")
	f.Renamed("record", "-record is now -out DIR")
	return func(ctx context.Context, inv *cli.Invocation) int { return runReplay(ctx, inv, o) }
}

func runReplay(ctx context.Context, inv *cli.Invocation, o *replayOptions) int {
	cfg := o.cfg
	if err := checkRanges([]rangeCheck{
		{"replicas", fmt.Sprint(cfg.Replicas), cfg.Replicas >= 1, "an integer >= 1"},
		// NaN compares false both ways: the test is written so it fails.
		{"pixel-tolerance", fmt.Sprint(cfg.PixelTolerance), cfg.PixelTolerance >= 0 && cfg.PixelTolerance < 1,
			"a fraction from 0 to 1, 1 excluded (0: compare screenshots by hash)"},
	}); err != nil {
		inv.Errorf("%v", err)
		return cli.ExitBadInput
	}
	if cfg.TaskFiles != "" {
		if _, err := os.Stat(cfg.TaskFiles); errors.Is(err, os.ErrNotExist) {
			inv.Errorf("-tasks %s: no such file or directory (-tasks takes task specs; select tasks by id with -task ID,...)", cfg.TaskFiles)
			return cli.ExitBadInput
		}
	}
	cfg.Mode = replay.Mode(o.mode)
	cfg.Masks = append([]replay.Mask(nil), replay.DefaultMasks...)
	for _, m := range o.masks {
		if m == "none" {
			cfg.Masks = []replay.Mask{}
			continue
		}
		name, expr, ok := strings.Cut(m, "=")
		re, err := regexp.Compile(expr)
		if !ok || name == "" || err != nil {
			inv.Errorf("-mask %q: want name=regex (%v)", m, err)
			return cli.ExitBadInput
		}
		cfg.Masks = append(cfg.Masks, replay.Mask{Name: name, Pattern: re, Replace: "<" + strings.ToUpper(name) + ">"})
	}
	cfg.Logger = inv.Logger()
	stopMetrics, err := watchRun(inv, o.metricsAddr, &cfg.Observer, "replay")
	if err != nil {
		return inv.Fail(cli.ExitBadInput, err)
	}
	defer stopMetrics()
	if !inv.Quiet && !inv.LogJSON() {
		w, tty := progressStream(inv)
		m := progress.New(w, progress.Options{Command: "replay", TTY: tty, EndLogged: true})
		defer m.Close()
		cfg.Observer = observe.Multi{cfg.Observer, m}
	}

	rep, err := replay.Run(ctx, cfg)
	err = inFlagWords(err, replayFlags)
	switch {
	case errors.Is(err, context.Canceled):
		return inv.Fail(cli.ExitInterrupted, err)
	case errors.Is(err, runtime.ErrUnavailable), errors.Is(err, docker.ErrNoEngine):
		return inv.Fail(cli.ExitUnavailable, err)
	case err != nil:
		return inv.Fail(cli.ExitBadInput, err)
	}
	if inv.JSON {
		inv.PrintJSON(rep)
	} else {
		printReplay(inv.Stdout, rep)
	}
	if o.report != "" {
		if err := writeReplayReport(o.report, rep); err != nil {
			inv.Errorf("%v", err)
			return cli.ExitFailed
		}
	}
	if rep.Errored > 0 || rep.Diverged > 0 {
		return cli.ExitFailed
	}
	return cli.ExitOK
}

// writeReplayReport writes the report as JSON or, for a .html name, as a
// page.
func writeReplayReport(path string, rep *replay.Report) error {
	var buf bytes.Buffer
	if strings.HasSuffix(strings.ToLower(path), ".html") {
		if err := replay.WriteHTML(&buf, rep); err != nil {
			return err
		}
	} else {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		buf.Write(append(data, '\n'))
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func printReplay(w io.Writer, rep *replay.Report) {
	for _, e := range rep.Episodes {
		if e.Status == replay.Identical {
			continue
		}
		fmt.Fprintf(w, "%s  %s  %s: %d/%d steps matched\n", e.Status, e.TaskID, e.EpisodeID, e.Matched, e.Steps)
		if e.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", e.Error)
		}
		if d := e.First; d != nil {
			fmt.Fprintf(w, "  first divergence at step %d (%s) %s:\n", d.Step, d.Field, readableAction(d.Action))
			for _, l := range strings.Split(d.Diff, "\n") {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
		if e.RewardChanged {
			fmt.Fprintf(w, "  reward changed: %s -> %s\n", fmtReward(e.RewardRecorded), fmtReward(e.RewardReplayed))
		}
	}
	fmt.Fprintf(w, "replay of %s on %s (%s): %d identical, %d diverged, %d errored\n",
		rep.Dataset, rep.Provider, rep.Mode, rep.Identical, rep.Diverged, rep.Errored)
	if rep.Mode == replay.Normalized {
		// Say what was masked: a difference hidden by a mask is not one.
		names := make([]string, len(rep.Masks))
		for i, m := range rep.Masks {
			names[i], _, _ = strings.Cut(m, ":")
		}
		if len(names) == 0 {
			names = []string{"none"}
		}
		fmt.Fprintf(w, "  normalized: ANSI escapes and trailing whitespace dropped; masked: %s (-mask NAME=REGEX adds one, -mask none drops the defaults)\n", strings.Join(names, ", "))
	}
}

// readableAction shows a canonical action JSON as "exec {"cmd":"ls > x"}":
// its kind, then its fields without the HTML escapes encoding/json adds.
func readableAction(action string) string {
	var a struct {
		Kind string `json:"kind"`
	}
	args, err := model.Arguments(action)
	if err != nil || json.Unmarshal([]byte(action), &a) != nil {
		return action
	}
	if string(args) == "{}" {
		return a.Kind
	}
	return a.Kind + " " + string(args)
}

func fmtReward(v *float64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}
