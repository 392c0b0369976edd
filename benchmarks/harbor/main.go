// Command harbor benchmarks the reset of a Harbor task on the docker
// provider: what an episode waits for its sandbox when the task's golden is
// forked with no standby (collect -reset fork -standby 0), when a standby
// fork is handed off (collect's default standby, which at -replicas 1 is one
// replica prepared ahead), and when its container is recreated for every
// episode (collect -reset recreate, what a harness without checkpoints does
// per trial). All three run in one process, through forkline's own pool,
// on the same task folder and image, so their ratios are the numbers to
// compare.
//
//	go run ./benchmarks/harbor -n 20 -md benchmarks/harbor/RESULTS.md
//
// It needs a Docker engine with forkline/debian (make images-debian): the
// default task, task/testdata/harbor/fix-greeting, builds FROM it.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/docker"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/task"
)

// config is what the flags set.
type config struct {
	Task           string
	N              int
	StandbyEpisode time.Duration
	MDPath         string
}

// row is one measured reset method.
type row struct {
	Name     string
	What     string
	Origins  []string // the provider's account of how each sandbox was made
	Resets   []time.Duration
	P50, P95 time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.Task, "task", "task/testdata/harbor/fix-greeting", "the Harbor task `FOLDER`")
	flag.IntVar(&cfg.N, "n", 20, "episodes per reset method")
	flag.DurationVar(&cfg.StandbyEpisode, "standby-episode", time.Second, "how long each episode of the standby method lasts (longer than a fork, so the standby keeps up)")
	flag.StringVar(&cfg.MDPath, "md", "", "write a Markdown report to `FILE`")
	flag.Parse()
	if flag.NArg() > 0 || cfg.N < 2 || cfg.StandbyEpisode < 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now().UTC()
	load := loadAverage()
	rows, image, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks/harbor:", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
	report := markdown(cfg, began, load, loadAverage(), image, rows)
	fmt.Print(report)
	if cfg.MDPath != "" {
		if err := os.WriteFile(cfg.MDPath, []byte(report), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks/harbor:", err)
			os.Exit(1)
		}
	}
}

func run(ctx context.Context, cfg config) ([]row, string, error) {
	spec, err := task.LoadHarbor(cfg.Task)
	if err != nil {
		return nil, "", err
	}
	tmpl, err := episode.Template(&spec)
	if err != nil {
		return nil, "", err
	}
	p, err := docker.New(ctx, providers.Options{RunID: fmt.Sprintf("bench-harbor-%d", os.Getpid())})
	if err != nil {
		return nil, "", err
	}
	defer p.Close(context.WithoutCancel(ctx))
	// The image is built (or found by its content tag) once, untimed, as
	// collect does before the first episode.
	if err := p.Prepare(ctx, []providers.Spec{tmpl.Spec}, os.Stderr); err != nil {
		return nil, "", err
	}
	image := spec.Image
	if tmpl.Spec.Build != nil {
		if image, err = docker.BuildTag(*tmpl.Spec.Build); err != nil {
			return nil, "", err
		}
	}

	var rows []row
	base, err := baseline(ctx, image, cfg.N)
	if err != nil {
		return nil, "", err
	}
	rows = append(rows, base)
	methods := []struct {
		name, what string
		strategy   pool.Strategy
		standby    int
		episode    time.Duration
	}{
		{"fork", "-reset fork -standby 0: Fork of the task's golden checkpoint while the episode waits", pool.Fork, 0, 0},
		{"standby", "-reset fork, the default standby (one at -replicas 1): a fork started ahead, handed off", pool.Fork, 1, cfg.StandbyEpisode},
		{"recreate", "-reset recreate: a new container from the task's image per episode", pool.Recreate, 0, 0},
	}
	for _, m := range methods {
		fmt.Fprintf(os.Stderr, "measuring %s x%d ...\n", m.name, cfg.N)
		r, err := episodes(ctx, p, tmpl, m.strategy, m.standby, m.episode, cfg.N)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", m.name, err)
		}
		r.Name, r.What = m.name, m.what+r.What
		rows = append(rows, r)
	}
	return rows, image, nil
}

// baseline is `docker run --rm --network none IMAGE true` through the CLI:
// the cheapest fresh container a user can have, for scale.
func baseline(ctx context.Context, image string, n int) (row, error) {
	r := row{Name: "docker run", What: "docker run --rm --network none IMAGE true (CLI), for scale"}
	for range n {
		began := time.Now()
		if out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", image, "true").CombinedOutput(); err != nil {
			return r, fmt.Errorf("docker run: %w: %s", err, out)
		}
		r.Resets = append(r.Resets, time.Since(began))
	}
	summarize(&r)
	return r, nil
}

// episodes runs n episodes of the task through a pool of one replica and
// returns what each waited for its sandbox (pool.Replica.Reset). Each
// episode checks its sandbox with one command, then lasts hold. The first
// episode of the standby method found nothing ready (a cold fork) and is
// left out of its row, as any later one that found the standby empty.
func episodes(ctx context.Context, p providers.Provider, tmpl *pool.Template, strategy pool.Strategy, standby int, hold time.Duration, n int) (row, error) {
	var r row
	pl, err := pool.New(pool.Config{Provider: p, Replicas: 1, Standby: standby, Strategy: strategy})
	if err != nil {
		return r, err
	}
	defer pl.Close(context.WithoutCancel(ctx))
	t := *tmpl
	if strategy == pool.Fork {
		if _, err := pl.Golden(ctx, &t); err != nil { // untimed, as in a run
			return r, err
		}
	}
	pl.Expect(ctx, &t, n)
	jobs := make(chan pool.Job, n)
	for range n {
		jobs <- pool.Job{Template: &t}
	}
	close(jobs)
	var episodeErr error
	cold := 0
	pl.Run(ctx, jobs, func(ctx context.Context, _ pool.Job, rep pool.Replica, err error) pool.Outcome {
		if err == nil {
			err = check(ctx, rep.Sandbox)
		}
		if err != nil {
			episodeErr = cmp.Or(episodeErr, err)
			return pool.Broken
		}
		if standby > 0 && !rep.Standby {
			cold++
		} else {
			r.Resets = append(r.Resets, rep.Reset)
			r.Origins = append(r.Origins, rep.Origin)
		}
		select {
		case <-time.After(hold):
		case <-ctx.Done():
		}
		return pool.Done
	})
	if episodeErr == nil {
		episodeErr = ctx.Err()
	}
	if episodeErr == nil && len(r.Resets) == 0 {
		episodeErr = fmt.Errorf("no episode of %d was measured (%d found no standby ready)", n, cold)
	}
	if standby > 0 {
		r.What = fmt.Sprintf(" (%d of %d resets; %d found none ready)", len(r.Resets), n, cold)
	}
	summarize(&r)
	return r, episodeErr
}

// check runs a command of the task's workspace: the sandbox is usable.
func check(ctx context.Context, sb providers.Sandbox) error {
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "test -x /app/greet.sh || test -d /app"})
	if err != nil {
		return err
	}
	if obs.Error {
		return fmt.Errorf("the sandbox has no /app: exit %d: %s", obs.ExitCode, obs.Text())
	}
	return nil
}

func summarize(r *row) {
	s := slices.Clone(r.Resets)
	slices.Sort(s)
	r.P50, r.P95 = quantile(s, 0.5), quantile(s, 0.95)
}

// quantile is the nearest-rank quantile of sorted s.
func quantile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func fmtMS(d time.Duration) string {
	v := float64(d) / 1e6
	if v < 1 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// loadAverage is the 1-minute load average, or "".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}

func markdown(cfg config, date time.Time, loadBefore, loadAfter, image string, rows []row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Harbor task reset: fork vs recreate\n\n")
	fmt.Fprintf(&b, "Command: `go run ./benchmarks/harbor %s`  \n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "Date: %s  \n", date.Format(time.RFC3339))
	fmt.Fprintf(&b, "Machine: %d CPUs, %s %s/%s  \n", goruntime.NumCPU(), goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
	fmt.Fprintf(&b, "Load average (1 min): %s at the start, %s at the end  \n", loadBefore, loadAfter)
	fmt.Fprintf(&b, "Task: %s (image %s)\n\n", cfg.Task, image)
	fmt.Fprintf(&b, "| method | what | n | origin | reset p50 ms | reset p95 ms | p50 / recreate |\n|---|---|---:|---|---:|---:|---:|\n")
	var recreate time.Duration
	for _, r := range rows {
		if r.Name == "recreate" {
			recreate = r.P50
		}
	}
	for _, r := range rows {
		origins := slices.Compact(slices.Sorted(slices.Values(r.Origins)))
		ratio := "-"
		if recreate > 0 {
			ratio = fmt.Sprintf("%.3f", float64(r.P50)/float64(recreate))
			if float64(r.P50)/float64(recreate) < 0.001 {
				ratio = "<0.001"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s |\n", r.Name, r.What, len(r.Resets), cmp.Or(strings.Join(origins, ", "), "-"), fmtMS(r.P50), fmtMS(r.P95), ratio)
	}
	b.WriteString(`
"reset" is what an episode waited for its sandbox (pool.Replica.Reset), as collect records it in
each episode's reset_ms; each episode then runs one command to check its sandbox. Samples run one
after another in one process, on a machine that may have had other work (the load above): the
ratios within one run are the numbers to compare, not the absolute times across machines.

A Harbor task has no setup step: its image is its golden state, so a fork starts a container from
that image (origin "image"), which is what recreating does too (origin "create"). Per episode the
two cost the same, within the noise of the run; what takes the reset off the episode's path is the
standby (on by default in collect, sized to -replicas), a fork started in the background while the previous episode runs and
handed off when it ends. The first episode, and any that ends sooner than a fork starts, finds no
standby ready and pays a fork ("found none ready"). A task whose golden holds work beyond its image
(a YAML task's setup:, which may use a setup network) saves that work on every fork as well: see
benchmarks/docker.
`)
	return b.String()
}
