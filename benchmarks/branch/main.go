// Command branch benchmarks what branching an episode at step k costs
// against what it replaces: re-running the first k steps from the golden.
//
// For each provider (local overlay forks, docker) it builds one golden of
// a -mb MiB workspace (-files files of random bytes), then for each diff
// size (small: 4 KiB per step; large: -large-mb MiB spread over the k
// steps) and -n trials:
//
//   - branch: a parent forked from the golden runs its k steps (untimed),
//     then the timed part — Checkpoint of the live parent (local: its
//     overlay upper layer frozen into a layer over the golden; docker: a
//     commit), a Fork of that checkpoint, and a first command in the fork
//     (`true`), i.e. until the branch can act;
//   - re-run: a Fork of the golden and the same k steps, timed until the
//     last one has run.
//
// Both are timed in the same run, interleaved trial by trial, and reported
// as p50, p95 and the ratio re-run p50 / branch p50 (above 1: branching is
// cheaper). The re-run counts the environment only: a real prefix also
// pays its policy's k decisions (seconds each for an LLM), which branching
// does not repeat, so the ratios understate what branching saves.
//
//	go run ./benchmarks/branch -md benchmarks/branch/RESULTS.md
//
// The docker half needs an engine and the forkline/busybox image; without
// them it is skipped and the report says so.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/forkline/forkline/providers"
	_ "github.com/forkline/forkline/providers/all"
	"github.com/forkline/forkline/runtime"
)

type config struct {
	N       int
	K       int
	MB      int
	Files   int
	LargeMB int
	Image   string
	Dir     string
	MD      string
	Only    string
}

// row is one measured case.
type row struct {
	Provider, Diff        string
	DiffBytes             int64
	Branch, Rerun         []time.Duration
	BranchP50, RerunP50   time.Duration
	BranchP95, RerunP95   time.Duration
	Ratio                 float64
	CheckpointP50         time.Duration
	checkpoint            []time.Duration
	GoldenSetup, GoldenCP time.Duration
}

func main() {
	var c config
	flag.IntVar(&c.N, "n", 10, "trials per case")
	flag.IntVar(&c.K, "k", 4, "the branch step: steps of the prefix")
	flag.IntVar(&c.MB, "mb", 100, "workspace size in MiB")
	flag.IntVar(&c.Files, "files", 100, "workspace files")
	flag.IntVar(&c.LargeMB, "large-mb", 32, "the large diff, in MiB, over the k steps")
	flag.StringVar(&c.Image, "image", "forkline/busybox", "docker image")
	flag.StringVar(&c.Dir, "dir", "", "where local sandboxes live (default: a temporary directory)")
	flag.StringVar(&c.MD, "md", "", "write a Markdown report here")
	flag.StringVar(&c.Only, "provider", "", "only this provider (local or docker)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks/branch:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, out io.Writer) error {
	if c.Dir == "" {
		d, err := os.MkdirTemp("", "forkline-branch-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		c.Dir = d
	}
	var rows []row
	var notes []string
	for _, name := range []string{"local", "docker"} {
		if c.Only != "" && c.Only != name {
			continue
		}
		if name == "docker" {
			if err := exec.Command("docker", "image", "inspect", c.Image).Run(); err != nil {
				notes = append(notes, fmt.Sprintf("docker: skipped (no engine or no image %s)", c.Image))
				continue
			}
		}
		rs, err := benchProvider(ctx, c, name, out)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, rs...)
	}
	fmt.Fprintln(out)
	table := reportTable(c, rows, notes)
	fmt.Fprint(out, table)
	if c.MD != "" {
		return os.WriteFile(c.MD, []byte(markdown(c, table)), 0o644)
	}
	return nil
}

func benchProvider(ctx context.Context, c config, name string, out io.Writer) ([]row, error) {
	params := map[string]string{}
	if name == "local" {
		params["fork"] = "overlay"
	}
	p, err := providers.Open(ctx, name, providers.Options{RunID: "benchmarks-branch", Dir: c.Dir, Params: params})
	if err != nil {
		return nil, err
	}
	defer p.Close(context.Background())
	spec := providers.Spec{}
	if name == "docker" {
		spec.Image = c.Image
	}
	began := time.Now()
	sb, err := p.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	size := (c.MB << 20) / c.Files
	if err := act(ctx, sb, fmt.Sprintf(`i=0; while [ $i -lt %d ]; do head -c %d /dev/urandom > base$i; i=$((i+1)); done`, c.Files, size)); err != nil {
		sb.Close(ctx)
		return nil, fmt.Errorf("golden setup: %w", err)
	}
	setup := time.Since(began)
	began = time.Now()
	golden, err := p.Checkpoint(ctx, sb, "benchmarks/branch golden")
	sb.Close(ctx)
	if err != nil {
		return nil, err
	}
	goldenCP := time.Since(began)
	defer p.Release(context.Background(), golden)
	fmt.Fprintf(out, "%s: golden of %d MiB in %d files: setup %s, checkpoint %s\n", name, c.MB, c.Files, round(setup), round(goldenCP))

	var rows []row
	for _, d := range []struct {
		name    string
		perStep int
	}{{"small", 4 << 10}, {"large", (c.LargeMB << 20) / c.K}} {
		r := row{Provider: name, Diff: d.name, DiffBytes: int64(d.perStep) * int64(c.K), GoldenSetup: setup, GoldenCP: goldenCP}
		steps := make([]string, c.K)
		for i := range steps {
			steps[i] = fmt.Sprintf("head -c %d /dev/urandom > diff%d && ls >/dev/null", d.perStep, i)
		}
		for trial := range c.N {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			b, cp, err := branchOnce(ctx, p, golden, steps)
			if err != nil {
				return nil, fmt.Errorf("branch, trial %d: %w", trial, err)
			}
			re, err := rerunOnce(ctx, p, golden, steps)
			if err != nil {
				return nil, fmt.Errorf("re-run, trial %d: %w", trial, err)
			}
			r.Branch, r.Rerun, r.checkpoint = append(r.Branch, b), append(r.Rerun, re), append(r.checkpoint, cp)
		}
		r.BranchP50, r.BranchP95 = quantile(r.Branch, 0.5), quantile(r.Branch, 0.95)
		r.RerunP50, r.RerunP95 = quantile(r.Rerun, 0.5), quantile(r.Rerun, 0.95)
		r.CheckpointP50 = quantile(r.checkpoint, 0.5)
		r.Ratio = float64(r.RerunP50) / float64(r.BranchP50)
		fmt.Fprintf(out, "  %s diff (%s): branch p50 %s (checkpoint %s), re-run p50 %s: ratio %.2f\n",
			d.name, mib(r.DiffBytes), round(r.BranchP50), round(r.CheckpointP50), round(r.RerunP50), r.Ratio)
		rows = append(rows, r)
	}
	return rows, nil
}

// branchOnce runs a parent's prefix untimed, then times checkpoint + fork +
// a first command.
func branchOnce(ctx context.Context, p providers.Provider, golden providers.Checkpoint, steps []string) (total, checkpoint time.Duration, err error) {
	parent, err := p.Fork(ctx, golden)
	if err != nil {
		return 0, 0, err
	}
	defer parent.Close(context.Background())
	for _, s := range steps {
		if err := act(ctx, parent, s); err != nil {
			return 0, 0, err
		}
	}
	began := time.Now()
	cp, err := p.Checkpoint(ctx, parent, "benchmarks/branch point")
	if err != nil {
		return 0, 0, err
	}
	checkpoint = time.Since(began)
	defer p.Release(context.Background(), cp)
	child, err := p.Fork(ctx, cp)
	if err != nil {
		return 0, 0, err
	}
	defer child.Close(context.Background())
	if err := act(ctx, child, "true"); err != nil {
		return 0, 0, err
	}
	return time.Since(began), checkpoint, nil
}

// rerunOnce times a fork of the golden and the prefix's steps.
func rerunOnce(ctx context.Context, p providers.Provider, golden providers.Checkpoint, steps []string) (time.Duration, error) {
	began := time.Now()
	sb, err := p.Fork(ctx, golden)
	if err != nil {
		return 0, err
	}
	defer sb.Close(context.Background())
	for _, s := range steps {
		if err := act(ctx, sb, s); err != nil {
			return 0, err
		}
	}
	return time.Since(began), nil
}

func act(ctx context.Context, sb providers.Sandbox, cmd string) error {
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: cmd, TimeoutMS: 10 * 60 * 1000})
	if err != nil {
		return err
	}
	if obs.ExitCode != 0 {
		return errors.New("command failed: " + cmd + ": " + string(obs.Output))
	}
	return nil
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1)+0.5)]
}

func round(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(time.Millisecond).String()
}

func mib(b int64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d MiB", b>>20)
}

func reportTable(c config, rows []row, notes []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "branch at step k=%d, %d trials each, %d MiB workspace in %d files\n\n", c.K, c.N, c.MB, c.Files)
	fmt.Fprintf(&b, "| provider | diff | branch p50 (p95) | of which checkpoint p50 | re-run p50 (p95) | re-run / branch |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s (%s) | %s (%s) | %s | %s (%s) | **%.2f×** |\n", r.Provider, r.Diff, mib(r.DiffBytes),
			round(r.BranchP50), round(r.BranchP95), round(r.CheckpointP50), round(r.RerunP50), round(r.RerunP95), r.Ratio)
	}
	for _, n := range notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	return b.String()
}

func markdown(c config, table string) string {
	load := "unknown"
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(l))[:3], " ")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Branch benchmark: checkpoint + fork at step k against re-running the prefix\n\n")
	fmt.Fprintf(&b, "Command: `go run ./benchmarks/branch -n %d -k %d -mb %d -files %d -large-mb %d -md benchmarks/branch/RESULTS.md`\n\n",
		c.N, c.K, c.MB, c.Files, c.LargeMB)
	fmt.Fprintf(&b, "Run %s on %d cores, %s, Linux, load average at the end %s; both sides measured in the same run, interleaved trial by trial, so the load weighs on both.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), goruntime.NumCPU(), goruntime.Version(), load)
	b.WriteString(table)
	b.WriteString(`
**branch** = Checkpoint of the live parent after its k steps + Fork of that
checkpoint + a first command in the fork (until the branch can act).
**re-run** = Fork of the golden + the k steps again. Each step writes its
share of the diff (random bytes) and lists the workspace. The re-run counts
the environment only; a real prefix also pays its policy's k decisions
(seconds each with an LLM), which a branch does not repeat — so these ratios
understate what branching saves.

local freezes only the fork's overlay upper layer, so its checkpoint follows
the diff, not the 100 MiB workspace, and a branch costs a fraction of
re-writing the diff. docker commits the container (a pause, then the diff
written to an image layer) and then pays a container start for the fork, as
a re-run does: with a small diff and cheap steps the two are about even, and
branching wins once the prefix's steps cost more than a commit (a large diff
here; any prefix with model calls).
`)
	return b.String()
}
