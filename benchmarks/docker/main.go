// Command docker benchmarks the reset latency of forkline's docker provider
// in one run, on one image (forkline/busybox by default), against the
// cheapest thing a user would otherwise do:
//
//   - baseline: `docker run --rm --network none IMAGE true` through the CLI;
//   - fork: Provider.Fork of a golden checkpoint (container create + start);
//   - create, start: the engine's own create and start of a container from
//     that image, timed apart, to show where a fork's time goes;
//   - fork+exec: a fork and its first exec, i.e. until a command has run;
//   - standby: the reset of an episode when the pool's standby
//     (pool.Config.Standby, collect -standby) had a replica ready: a
//     hand-off. Each episode lasts -standby-episode, so the standby has time
//     to refill, as it has in a run whose episodes take longer than a fork;
//   - recreate: a fresh container plus a setup of about 2 s (sleep 2 and
//     writing files), what a run without checkpoints pays per episode;
//   - and, for the standby design, unpause of a paused container, one exec
//     round trip and the checkpoint (commit) itself.
//
// Each is printed with its p50, p95 and its p50 as a ratio to the
// baseline's. -json writes the numbers; -md writes a Markdown report (the
// one in benchmarks/docker/RESULTS.md) with the command, date and machine.
//
//	go run ./benchmarks/docker -n 30 -md benchmarks/docker/RESULTS.md
//
// It needs a Docker engine and the image (forkline images, or make images).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/docker"
	"github.com/forkline/forkline/runtime"
)

// config is what the flags set.
type config struct {
	N        int
	Recreate int
	Image    string
	JSONPath string
	MDPath   string
	SetupCmd string
	// StandbyEpisode is how long each episode of the standby measure lasts.
	StandbyEpisode time.Duration
}

// defaultSetup is the setup of recreate and of the golden sandbox: about
// 2 s of work that leaves files behind, in one exec.
const defaultSetup = `sleep 2; mkdir -p src; i=0; while [ $i -lt 20 ]; do head -c 4096 /dev/zero | tr '\000' x > src/file$i.txt; i=$((i+1)); done`

// measure is one row of the report.
type measure struct {
	Name  string  `json:"name"`
	What  string  `json:"what"`
	N     int     `json:"n"`
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	Ratio float64 `json:"ratio_to_baseline"` // p50 / baseline p50
}

// report is the whole run.
type report struct {
	Command  string    `json:"command"`
	Date     time.Time `json:"date"`
	Machine  machine   `json:"machine"`
	Image    string    `json:"image"`
	Measures []measure `json:"measures"`
}

type machine struct {
	OS       string `json:"os"`
	Kernel   string `json:"kernel"`
	CPU      string `json:"cpu"`
	CPUs     int    `json:"cpus"`
	MemoryMB int64  `json:"memory_mb"`
	Engine   string `json:"engine"`
	API      string `json:"api"`
	Go       string `json:"go"`
	// LoadBefore and LoadAfter are the 1-minute load averages when the run
	// began and ended: other work on the machine skews every number.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

// loadAverage is the 1-minute load average, or "".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func main() {
	var cfg config
	flag.IntVar(&cfg.N, "n", 30, "samples for fork, fork+exec, standby, baseline, unpause, exec")
	flag.IntVar(&cfg.Recreate, "recreate-n", 5, "samples for recreate (each takes the setup's 2 s)")
	flag.StringVar(&cfg.Image, "image", docker.ImageBusybox, "image to run")
	flag.StringVar(&cfg.JSONPath, "json", "", "write the results as JSON to `FILE`")
	flag.StringVar(&cfg.MDPath, "md", "", "write a Markdown report to `FILE`")
	flag.StringVar(&cfg.SetupCmd, "setup", defaultSetup, "the setup command of recreate (and of the golden sandbox)")
	flag.DurationVar(&cfg.StandbyEpisode, "standby-episode", time.Second, "how long each episode of the standby measure lasts (longer than a fork, so the standby keeps up)")
	flag.Parse()
	if flag.NArg() > 0 || cfg.N < 1 || cfg.Recreate < 1 || cfg.StandbyEpisode < 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks/docker:", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
	printTable(os.Stdout, rep)
	if cfg.JSONPath != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(cfg.JSONPath, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks/docker:", err)
			os.Exit(1)
		}
	}
	if cfg.MDPath != "" {
		if err := os.WriteFile(cfg.MDPath, []byte(markdown(rep)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks/docker:", err)
			os.Exit(1)
		}
	}
}

func run(ctx context.Context, cfg config) (*report, error) {
	p, err := docker.New(ctx, providers.Options{RunID: fmt.Sprintf("bench-%d", os.Getpid()), Params: map[string]string{docker.ParamImage: cfg.Image}})
	if err != nil {
		return nil, err
	}
	defer p.Close(context.WithoutCancel(ctx))
	cli := p.Client()
	if _, err := docker.EnsureImages(ctx, cli); err != nil && cfg.Image == docker.ImageBusybox {
		return nil, err
	}
	rep := &report{
		Command: "go run ./benchmarks/docker " + strings.Join(os.Args[1:], " "),
		Date:    time.Now().UTC(),
		Machine: describeMachine(ctx, cli),
		Image:   cfg.Image,
	}
	add := func(name, what string, d []time.Duration) {
		rep.Measures = append(rep.Measures, summarize(name, what, d))
		fmt.Fprintf(os.Stderr, "%-10s done (%d samples)\n", name, len(d))
	}

	base, err := sample(ctx, cfg.N, func() error {
		out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", cfg.Image, "true").CombinedOutput()
		if err != nil {
			return fmt.Errorf("docker run: %w: %s", err, out)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	add("baseline", "docker run --rm --network none IMAGE true (CLI)", base)

	// The golden sandbox: a setup like recreate's, frozen once.
	golden, err := p.Create(ctx, providers.Spec{})
	if err != nil {
		return nil, err
	}
	defer golden.Close(context.WithoutCancel(ctx))
	if err := setup(ctx, golden, cfg); err != nil {
		return nil, err
	}
	var ckTimes []time.Duration
	var cp providers.Checkpoint
	for i := 0; i < 5; i++ {
		began := time.Now()
		c, err := p.Checkpoint(ctx, golden, "bench")
		if err != nil {
			return nil, err
		}
		ckTimes = append(ckTimes, time.Since(began))
		if i == 0 {
			cp = c
		} else if err := p.Release(ctx, c); err != nil {
			return nil, err
		}
	}
	add("checkpoint", fmt.Sprintf("commit of the golden sandbox (%d B diff)", cp.Bytes), ckTimes)

	forks, err := sampleSandbox(ctx, cfg.N, func() (providers.Sandbox, error) { return p.Fork(ctx, cp) })
	if err != nil {
		return nil, err
	}
	add("fork", "Fork: container create + start from the checkpoint image", forks)

	// Where a fork's time goes: the engine's own create and start of a
	// container from the same image, with the same init and network, timed
	// apart. What a fork takes beyond their sum is forkline's.
	creates, starts, err := engineCreateStart(ctx, cli, cp.ID, cfg.N)
	if err != nil {
		return nil, err
	}
	add("create", "the engine's ContainerCreate alone (same image, --init, network none)", creates)
	add("start", "the engine's ContainerStart alone of that container", starts)

	forkExec, err := sampleSandbox(ctx, cfg.N, func() (providers.Sandbox, error) {
		sb, err := p.Fork(ctx, cp)
		if err != nil {
			return nil, err
		}
		return sb, mustExec(ctx, sb, "true")
	})
	if err != nil {
		return nil, err
	}
	add("fork+exec", "Fork, then the first exec (true) has run", forkExec)

	standby, cold, err := poolStandby(ctx, p, cfg)
	if err != nil {
		return nil, err
	}
	add("standby", fmt.Sprintf("pool reset with a standby replica ready: a hand-off (%d of %d resets; %d found none ready)",
		len(standby), len(standby)+cold, cold), standby)

	recreate, err := sampleSandbox(ctx, cfg.Recreate, func() (providers.Sandbox, error) {
		sb, err := p.Create(ctx, providers.Spec{})
		if err != nil {
			return nil, err
		}
		return sb, setup(ctx, sb, cfg)
	})
	if err != nil {
		return nil, err
	}
	what := "Create + setup (sleep 2, then 20 files of 4 KiB, one exec)"
	if cfg.SetupCmd != defaultSetup {
		what = fmt.Sprintf("Create + setup (%s)", cfg.SetupCmd)
	}
	add("recreate", what, recreate)

	// For the standby design: what pausing standby forks would add.
	sb, err := p.Fork(ctx, cp)
	if err != nil {
		return nil, err
	}
	defer sb.Close(context.WithoutCancel(ctx))
	id := sb.Info().ID
	var unpause []time.Duration
	for i := 0; i < cfg.N; i++ {
		if _, err := cli.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err != nil {
			return nil, err
		}
		if err := waitPaused(ctx, cli, id, true); err != nil {
			return nil, err
		}
		began := time.Now()
		if _, err := cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{}); err != nil {
			return nil, err
		}
		unpause = append(unpause, time.Since(began))
		// Engine 20.10 records the state change from an event, a moment
		// after the call returns; pausing again before that fails.
		if err := waitPaused(ctx, cli, id, false); err != nil {
			return nil, err
		}
	}
	add("unpause", "ContainerUnpause of a paused fork (the cost a paused standby would add)", unpause)

	execs, err := sample(ctx, cfg.N, func() error { return mustExec(ctx, sb, "true") })
	if err != nil {
		return nil, err
	}
	add("exec", "one exec round trip (true) in a running fork", execs)

	rep.Machine.LoadAfter = loadAverage()
	for i := range rep.Measures {
		rep.Measures[i].Ratio = round(rep.Measures[i].P50MS/rep.Measures[0].P50MS, 3)
	}
	return rep, nil
}

// poolStandby runs cfg.N episodes of one task through a pool with one
// replica and a standby of one, as collect -replicas 1 -standby 1 does, and
// returns the resets that were hand-offs of a ready standby replica and how
// many found none ready (a cold fork: the first one, and any the standby
// did not refill in time). Each episode runs one command and lasts
// cfg.StandbyEpisode; the golden build is the pool's own, untimed.
func poolStandby(ctx context.Context, p providers.Provider, cfg config) ([]time.Duration, int, error) {
	pl, err := pool.New(pool.Config{Provider: p, Replicas: 1, Standby: 1, Strategy: pool.Fork})
	if err != nil {
		return nil, 0, err
	}
	defer pl.Close(context.WithoutCancel(ctx))
	t := &pool.Template{Key: "bench-standby", Setup: []string{cfg.SetupCmd}, CommandTimeout: time.Minute}
	if _, err := pl.Golden(ctx, t); err != nil {
		return nil, 0, err
	}
	pl.Expect(ctx, t, cfg.N)
	jobs := make(chan pool.Job, cfg.N)
	for range cfg.N {
		jobs <- pool.Job{Template: t}
	}
	close(jobs)
	var handOffs []time.Duration
	cold := 0
	var episodeErr error
	pl.Run(ctx, jobs, func(ctx context.Context, _ pool.Job, r pool.Replica, err error) pool.Outcome {
		if err == nil {
			err = mustExec(ctx, r.Sandbox, "true")
		}
		if err != nil {
			episodeErr = cmp.Or(episodeErr, err)
			return pool.Broken
		}
		if r.Standby {
			handOffs = append(handOffs, r.Reset)
		} else {
			cold++
		}
		select {
		case <-time.After(cfg.StandbyEpisode):
		case <-ctx.Done():
		}
		return pool.Done
	})
	if episodeErr == nil {
		episodeErr = ctx.Err()
	}
	if episodeErr == nil && len(handOffs) == 0 {
		episodeErr = fmt.Errorf("no reset found a standby replica ready in %d episodes of %s", cfg.N, cfg.StandbyEpisode)
	}
	return handOffs, cold, episodeErr
}

// waitPaused waits until the engine reports container id paused (or not).
func waitPaused(ctx context.Context, cli *client.Client, id string, want bool) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		ci, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			return err
		}
		if ci.Container.State != nil && ci.Container.State.Paused == want {
			return nil
		}
	}
	return fmt.Errorf("container %s: paused is not %v after 10 s", id, want)
}

// setup is the task setup of recreate and of the golden sandbox.
func setup(ctx context.Context, sb providers.Sandbox, cfg config) error {
	return mustExec(ctx, sb, cfg.SetupCmd)
}

func mustExec(ctx context.Context, sb providers.Sandbox, cmd string) error {
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: cmd})
	if err != nil {
		return err
	}
	if obs.Error {
		return fmt.Errorf("exec %q: exit %d: %s", cmd, obs.ExitCode, obs.Text())
	}
	return nil
}

// sample times f n times.
func sample(ctx context.Context, n int, f func() error) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		began := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		out = append(out, time.Since(began))
	}
	return out, nil
}

// engineCreateStart creates and starts n containers from image straight
// through the engine's API, as a fork does but without forkline around
// it, and returns each create's and each start's time. Every container is
// labelled as a benchmark's sandbox and removed before the next.
func engineCreateStart(ctx context.Context, cli *client.Client, image string, n int) (creates, starts []time.Duration, err error) {
	init := true
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		began := time.Now()
		created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config: &container.Config{
				Image:      image,
				Cmd:        []string{"sleep", "3600"},
				Entrypoint: []string{},
				Labels:     map[string]string{docker.LabelKind: "sandbox", docker.LabelRun: fmt.Sprintf("bench-%d", os.Getpid())},
			},
			HostConfig: &container.HostConfig{NetworkMode: "none", Init: &init},
		})
		if err != nil {
			return nil, nil, fmt.Errorf("engine create: %w", err)
		}
		created1 := time.Now()
		_, serr := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{})
		started := time.Now()
		_, rerr := cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, client.ContainerRemoveOptions{Force: true})
		if serr != nil {
			return nil, nil, fmt.Errorf("engine start: %w", serr)
		}
		if rerr != nil {
			return nil, nil, fmt.Errorf("engine remove: %w", rerr)
		}
		creates = append(creates, created1.Sub(began))
		starts = append(starts, started.Sub(created1))
	}
	return creates, starts, nil
}

// sampleSandbox times f n times and closes the sandbox it made, untimed.
func sampleSandbox(ctx context.Context, n int, f func() (providers.Sandbox, error)) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		began := time.Now()
		sb, err := f()
		took := time.Since(began)
		if sb != nil {
			_ = sb.Close(context.WithoutCancel(ctx))
		}
		if err != nil {
			return nil, err
		}
		out = append(out, took)
	}
	return out, nil
}

func summarize(name, what string, d []time.Duration) measure {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return measure{Name: name, What: what, N: len(s), P50MS: ms(quantile(s, 0.5)), P95MS: ms(quantile(s, 0.95))}
}

// quantile is the nearest-rank quantile of sorted s.
func quantile(s []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return round(float64(d)/1e6, 3) }

func round(x float64, digits int) float64 {
	f := math.Pow(10, float64(digits))
	return math.Round(x*f) / f
}

// fmtMS prints milliseconds, keeping sub-millisecond values readable.
func fmtMS(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func fmtRatio(r float64) string {
	if r < 0.001 {
		return "<0.001"
	}
	return fmt.Sprintf("%.3f", r)
}

func printTable(w io.Writer, rep *report) {
	fmt.Fprintf(w, "%-11s %4s %10s %10s %9s  %s\n", "measure", "n", "p50 ms", "p95 ms", "x base", "what")
	for _, m := range rep.Measures {
		fmt.Fprintf(w, "%-11s %4d %10.2f %10.2f %9.3f  %s\n", m.Name, m.N, m.P50MS, m.P95MS, m.Ratio, m.What)
	}
}

func markdown(rep *report) string {
	var b strings.Builder
	m := rep.Machine
	fmt.Fprintf(&b, "# Docker provider: reset latency\n\n")
	fmt.Fprintf(&b, "Command: `%s`  \n", rep.Command)
	fmt.Fprintf(&b, "Date: %s  \n", rep.Date.Format(time.RFC3339))
	fmt.Fprintf(&b, "Machine: %s, kernel %s, %d × %s, %d MiB; Docker Engine %s (API %s); %s  \n",
		m.OS, m.Kernel, m.CPUs, m.CPU, m.MemoryMB, m.Engine, m.API, m.Go)
	fmt.Fprintf(&b, "Load average (1 min): %s at the start, %s at the end  \n", m.LoadBefore, m.LoadAfter)
	fmt.Fprintf(&b, "Image: %s\n\n", rep.Image)
	fmt.Fprintf(&b, "| measure | what | n | p50 ms | p95 ms | p50 / baseline |\n|---|---|---:|---:|---:|---:|\n")
	by := map[string]measure{}
	for _, x := range rep.Measures {
		by[x.Name] = x
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s |\n", x.Name, x.What, x.N, fmtMS(x.P50MS), fmtMS(x.P95MS), fmtRatio(x.Ratio))
	}
	fork, recreate, standby := by["fork"], by["recreate"], by["standby"]
	if cr, st := by["create"], by["start"]; fork.P50MS > 0 && cr.P50MS > 0 && st.P50MS > 0 {
		engine := cr.P50MS + st.P50MS
		fmt.Fprintf(&b, "\nWhere a fork's time goes: the engine's own create (%s ms) and start (%s ms) of a container "+
			"from the same image add up to %s ms, %.0f %% of the fork's %s ms and %.2f× the baseline's `docker run`.",
			fmtMS(cr.P50MS), fmtMS(st.P50MS), fmtMS(engine), 100*engine/fork.P50MS, fmtMS(fork.P50MS), engine/rep.Measures[0].P50MS)
		if rest := fork.P50MS - engine; rest > 0 {
			fmt.Fprintf(&b, " The rest (%s ms) is what forkline adds: its own work around the two calls, and the "+
				"resource limits and bind-mounted output directory it asks the engine for.", fmtMS(rest))
		} else {
			b.WriteString(" Forkline adds nothing measurable to them: the two medians differ by less than the run's noise.")
		}
		if base := rep.Measures[0].P50MS; st.P50MS/base > 0.4 {
			fmt.Fprintf(&b, " The engine's start alone is %.2f× the baseline, so no fork that starts a container through "+
				"this engine reaches 0.4× it; what takes the fork off an episode's path is the standby.", st.P50MS/base)
		}
		b.WriteString("\n")
	}
	if fork.P50MS > 0 && recreate.P50MS > 0 {
		fmt.Fprintf(&b, "\nPer episode, a fork costs %s ms where recreating costs %s ms (%.1f× more); "+
			"a standby hand-off costs %s ms, as long as the standby keeps up (a fork takes about %s ms to start, "+
			"one at a time per task).\n", fmtMS(fork.P50MS), fmtMS(recreate.P50MS), recreate.P50MS/fork.P50MS,
			fmtMS(standby.P50MS), fmtMS(fork.P50MS))
	}
	b.WriteString(`
Samples run one after another in one process, on a machine that may have had other work; the
ratios within one run are the numbers to compare, not the absolute times across machines.
"fork" ends when the container is started; "fork+exec" when its first command has run.
"recreate" is what an episode costs without checkpoints: a fresh container and the task's setup
again. "standby" is the pool's reset when its standby (on by default in collect, sized to
-replicas) had a replica ready: a fork started ahead of time, with the task's start commands run,
handed off. It is not paused, because
"unpause" would add that much to every hand-off while a sleeping container costs nothing.
`)
	return b.String()
}

func describeMachine(ctx context.Context, cli *client.Client) machine {
	m := machine{CPUs: goruntime.NumCPU(), Go: goruntime.Version(), LoadBefore: loadAverage()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for _, l := range strings.Split(string(b), "\n") {
			if _, err := fmt.Sscanf(l, "MemTotal: %d kB", &kb); err == nil {
				m.MemoryMB = kb / 1024
				break
			}
		}
	}
	if v, err := cli.ServerVersion(ctx, client.ServerVersionOptions{}); err == nil {
		m.Engine, m.API = v.Version, v.APIVersion
	}
	return m
}
