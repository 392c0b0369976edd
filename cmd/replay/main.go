// Command replay re-runs the episodes of a dataset — on the provider it was
// collected with or another one — and reports where they diverge. It is meant
// as a CI gate for environments: a new image, provider or forkline version
// must reproduce the environment the data was collected in.
//
//	replay -in runs/demo
//	replay -in runs/demo -compare normalized -mask 'pid=\bpid \d+' -report diff.json
//
// Exit codes: 0 every episode identical, 1 at least one diverged, 2 error
// (bad input, or an episode that could not be replayed), 130 interrupted.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/replay"

	_ "github.com/forkline/forkline/providers/all" // registers every backend
)

const (
	exitIdentical = 0
	exitDiverged  = 1
	exitError     = 2
	exitCancelled = 130
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

type kvFlag map[string]string

func (m kvFlag) String() string { return fmt.Sprint(map[string]string(m)) }
func (m kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	m[k] = v
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := replay.Config{ProviderParams: map[string]string{}, Log: stderr}
	fs.StringVar(&cfg.In, "in", "", "dataset `DIR` to replay (required)")
	fs.StringVar(&cfg.Provider, "provider", "", "provider to replay on (default: the one the dataset was collected with): "+strings.Join(providers.Names(), ", "))
	fs.Var(kvFlag(cfg.ProviderParams), "provider-opt", "provider setting `key=value` (repeatable)")
	fs.StringVar(&cfg.Image, "image", "", "replace every task's image (docker)")
	fs.StringVar(&cfg.TaskFiles, "tasks-from", "", "replay with the specs in `DIR|FILE` instead of the recorded ones (same task ids)")
	var tasks, episodes, masks listFlag
	fs.Var(&tasks, "tasks", "only these task `ids` (comma-separated)")
	fs.Var(&episodes, "episodes", "only these episode ids or id `prefixes` (comma-separated)")
	mode := fs.String("compare", "exact", "comparison: exact, normalized (ANSI, trailing whitespace, masks) or hash")
	fs.Var(&masks, "mask", "extra normalized-mode mask `name=regex` (repeatable); -mask none drops the defaults")
	fs.IntVar(&cfg.Replicas, "replicas", 4, "episodes replayed in parallel")
	fs.StringVar(&cfg.WorkDir, "workdir", "", "where sandboxes live on the host")
	reportFile := fs.String("report", "", "also write the report to `FILE`: .json, or .html (one self-contained page, screenshots included)")
	fs.Float64Var(&cfg.PixelTolerance, "pixel-tolerance", 0, "screenshots match when at most this `fraction` of pixels differ (0: compare by hash)")
	fs.StringVar(&cfg.Record, "record", "", "write the replayed episodes as a new dataset in `DIR`")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: replay -in DIR [flags]\n\nExit codes: 0 identical, 1 diverged, 2 error, 130 interrupted.\nDefault masks (normalized):\n")
		for _, m := range replay.DefaultMasks {
			fmt.Fprintf(fs.Output(), "  %-20s %s -> %s\n", m.Name, m.Pattern, m.Replace)
		}
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitIdentical
		}
		return exitError
	}
	if cfg.In == "" {
		fmt.Fprintln(stderr, "replay: -in is required")
		return exitError
	}
	if err := checkRanges(fs, cfg); err != nil {
		fmt.Fprintln(stderr, err)
		return exitError
	}
	cfg.Mode = replay.Mode(*mode)
	cfg.Tasks, cfg.EpisodeIDs = tasks, episodes
	cfg.Masks = append([]replay.Mask(nil), replay.DefaultMasks...)
	for _, m := range masks {
		if m == "none" {
			cfg.Masks = []replay.Mask{}
			continue
		}
		name, expr, ok := strings.Cut(m, "=")
		re, err := regexp.Compile(expr)
		if !ok || err != nil {
			fmt.Fprintf(stderr, "replay: -mask %q: want name=regex (%v)\n", m, err)
			return exitError
		}
		cfg.Masks = append(cfg.Masks, replay.Mask{Name: name, Pattern: re, Replace: "<" + strings.ToUpper(name) + ">"})
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := replay.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		if errors.Is(err, context.Canceled) {
			return exitCancelled
		}
		return exitError
	}
	printReport(stdout, rep)
	if *reportFile != "" {
		if err := writeReport(*reportFile, rep); err != nil {
			fmt.Fprintln(stderr, "replay:", err)
			return exitError
		}
	}
	switch {
	case rep.Errored > 0:
		return exitError
	case rep.Diverged > 0:
		return exitDiverged
	}
	return exitIdentical
}

// checkRanges refuses a numeric flag outside its range, naming the flag,
// the value and the range (replay.Run would otherwise replace a
// non-positive -replicas by its default).
func checkRanges(fs *flag.FlagSet, cfg replay.Config) error {
	for _, c := range []struct {
		name string
		ok   bool
		want string
	}{
		{"replicas", cfg.Replicas >= 1, "an integer >= 1"},
		// NaN compares false both ways: the test is written so it fails.
		{"pixel-tolerance", cfg.PixelTolerance >= 0 && cfg.PixelTolerance <= 1, "a fraction from 0 to 1 (0: compare screenshots by hash)"},
	} {
		if !c.ok {
			return fmt.Errorf("replay: -%s %s: want %s", c.name, fs.Lookup(c.name).Value, c.want)
		}
	}
	return nil
}

// writeReport writes the report as JSON or, for a .html name, as a page.
func writeReport(path string, rep *replay.Report) error {
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

func printReport(w io.Writer, rep *replay.Report) {
	for _, e := range rep.Episodes {
		if e.Status == replay.Identical {
			continue
		}
		fmt.Fprintf(w, "%s  %s  %s: %d/%d steps matched\n", e.Status, e.TaskID, e.EpisodeID, e.Matched, e.Steps)
		if e.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", e.Error)
		}
		if d := e.First; d != nil {
			fmt.Fprintf(w, "  first divergence at step %d (%s) %s:\n", d.Step, d.Field, d.Action)
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
}

func fmtReward(v *float64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}
