// Command gvisor benchmarks forkline's gvisor provider, whose forks restore
// running processes with their memory, against a cold start of the same
// task in the same run:
//
//   - cold: Create, the task's setup and its start (a server that takes
//     about 2 s to start, then keeps a counter in memory), until the server
//     answers: what an episode costs without a memory checkpoint;
//   - checkpoint: runsc checkpoint of the set-up, started sandbox (the
//     golden), with the size of its image;
//   - restore: Provider.Fork of the golden (runsc restore);
//   - restore+answer: a fork until its restored server has answered one
//     request: the reset an episode really waits for;
//   - standby: the pool's reset when its standby (collect -standby) had a
//     restored replica ready: a hand-off;
//   - mid-episode: a checkpoint of a fork in the middle of an episode, as
//     the provider makes it (runsc checkpoint, then the parent restored at
//     its next action), against runsc checkpoint --leave-running (bounded:
//     in Debian's release it did not return).
//
// It runs each for a small sandbox (the server alone) and a 512 MiB one
// (the server plus 512 MiB of random bytes written into the sandbox's
// memory-backed files by setup), on the ptrace platform and, bounded by a
// timeout, kvm. Each row prints p50, p95 and the ratio of the cold start's
// p50 to its p50. -md writes the Markdown report (benchmarks/gvisor/RESULTS.md)
// with the command, date, machine and its load average.
//
//	go run ./benchmarks/gvisor -n 20 -md benchmarks/gvisor/RESULTS.md -json results.json
//	go run ./benchmarks/gvisor -render results.json -md benchmarks/gvisor/RESULTS.md
//
// It needs runsc as root, and the Docker engine with forkline/busybox
// unless -rootfs names a directory (gvisor.BusyboxRootfs makes one).
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
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/gvisor"
	"github.com/forkline/forkline/runtime"
)

// config is what the flags set.
type config struct {
	N, NLarge, Cold int
	Rootfs          string
	Platforms       []string
	BootTimeout     time.Duration
	JSONPath        string
	MDPath          string
}

// The task every measure runs: the server keeps its count only in memory
// and answers a request file; start takes about 2 s before it starts it.
const (
	// The server polls for a request file rather than blocking on a FIFO:
	// a process blocked opening a FIFO when runsc 20221219 checkpointed it
	// did not wake in the restored sandbox (seen here).
	serverScript = `n=0; while :; do if [ -f req ]; then rm -f req; n=$((n+1)); echo $n > resp.tmp; mv resp.tmp resp; fi; sleep 0.05; done`
	askScript    = `: > req; i=0; while [ ! -f resp ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; cat resp; rm -f resp`
	startCmd     = `sleep 2; sh server.sh >/dev/null 2>&1 &`
	largeSetup   = `head -c 536870912 /dev/urandom > /tmp/ballast`
	largeBytes   = 512 << 20
)

// size is one sandbox the benchmark runs.
type size struct {
	Name     string
	Setup    []string
	MemoryMB int64
}

var sizes = []size{
	{Name: "small", MemoryMB: 512},
	{Name: "512MiB", Setup: []string{largeSetup}, MemoryMB: 1536},
}

// measure is one row of the report.
type measure struct {
	Platform string  `json:"platform"`
	Size     string  `json:"size"`
	Name     string  `json:"name"`
	What     string  `json:"what"`
	N        int     `json:"n"`
	P50MS    float64 `json:"p50_ms"`
	P95MS    float64 `json:"p95_ms"`
	// ColdOver is the cold start's p50 over this row's p50: how many of
	// this the cold start costs.
	ColdOver float64 `json:"cold_over"`
}

// outcome is what became of one platform and size.
type outcome struct {
	Platform   string    `json:"platform"`
	Size       string    `json:"size"`
	ImageBytes int64     `json:"image_bytes"`
	Measures   []measure `json:"measures"`
	Error      string    `json:"error,omitempty"`
	Load       []string  `json:"load"` // 1-minute load average at the start and end
}

// report is the whole run.
type report struct {
	Command  string    `json:"command"`
	Date     time.Time `json:"date"`
	Machine  machine   `json:"machine"`
	Rootfs   string    `json:"rootfs"`
	Outcomes []outcome `json:"outcomes"`
}

type machine struct {
	OS       string `json:"os"`
	Kernel   string `json:"kernel"`
	CPU      string `json:"cpu"`
	CPUs     int    `json:"cpus"`
	MemoryMB int64  `json:"memory_mb"`
	Runsc    string `json:"runsc"`
	Go       string `json:"go"`
	KVM      bool   `json:"kvm"`
}

func main() {
	var cfg config
	var platforms string
	flag.IntVar(&cfg.N, "n", 20, "samples of restore, restore+answer, standby and mid-episode for the small sandbox")
	flag.IntVar(&cfg.NLarge, "n-large", 8, "the same for the 512 MiB sandbox")
	flag.IntVar(&cfg.Cold, "cold-n", 5, "samples of the cold start")
	flag.StringVar(&cfg.Rootfs, "rootfs", "", "a root filesystem `DIR` (default: forkline/busybox through the Docker engine)")
	flag.StringVar(&platforms, "platforms", "ptrace,kvm", "runsc platforms to run, comma-separated")
	flag.DurationVar(&cfg.BootTimeout, "boot-timeout", 60*time.Second, "bound on one runsc run or restore (kvm may hang at boot)")
	flag.StringVar(&cfg.JSONPath, "json", "", "write the results as JSON to `FILE`")
	flag.StringVar(&cfg.MDPath, "md", "", "write a Markdown report to `FILE`")
	render := flag.String("render", "", "run nothing: write the -md report of the JSON results in `FILE` (from -json)")
	flag.Parse()
	if *render != "" {
		var rep report
		b, err := os.ReadFile(*render)
		if err == nil {
			err = json.Unmarshal(b, &rep)
		}
		if err == nil && cfg.MDPath != "" {
			err = os.WriteFile(cfg.MDPath, []byte(markdown(&rep)), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks/gvisor:", err)
			os.Exit(1)
		}
		printTable(os.Stdout, &rep)
		return
	}
	cfg.Platforms = strings.Split(platforms, ",")
	if flag.NArg() > 0 || cfg.N < 2 || cfg.NLarge < 2 || cfg.Cold < 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks/gvisor:", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
	printTable(os.Stdout, rep)
	if cfg.JSONPath != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(cfg.JSONPath, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks/gvisor:", err)
			os.Exit(1)
		}
	}
	if cfg.MDPath != "" {
		if err := os.WriteFile(cfg.MDPath, []byte(markdown(rep)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks/gvisor:", err)
			os.Exit(1)
		}
	}
}

func run(ctx context.Context, cfg config) (*report, error) {
	rep := &report{
		Command: "go run ./benchmarks/gvisor " + strings.Join(os.Args[1:], " "),
		Date:    time.Now().UTC(),
		Machine: describeMachine(ctx),
		Rootfs:  "forkline/busybox (through the Docker engine)",
	}
	if cfg.Rootfs != "" {
		rep.Rootfs = "directory " + cfg.Rootfs
	}
	for _, platform := range cfg.Platforms {
		for _, sz := range sizes {
			o := outcome{Platform: platform, Size: sz.Name, Load: []string{loadAverage()}}
			n := cfg.N
			if sz.Name != "small" {
				n = cfg.NLarge
			}
			err := measureOne(ctx, cfg, platform, sz, n, &o)
			o.Load = append(o.Load, loadAverage())
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				o.Error = err.Error()
				fmt.Fprintf(os.Stderr, "%s/%s: %v\n", platform, sz.Name, err)
			}
			rep.Outcomes = append(rep.Outcomes, o)
			if err != nil && platform != "ptrace" {
				break // a platform that cannot run the small sandbox will not run the large
			}
		}
	}
	return rep, nil
}

// measureOne runs every measure of one platform and size into o.
func measureOne(ctx context.Context, cfg config, platform string, sz size, n int, o *outcome) error {
	params := map[string]string{gvisor.ParamPlatform: platform, gvisor.ParamBootTimeout: cfg.BootTimeout.String()}
	if cfg.Rootfs != "" {
		params[gvisor.ParamRootfs] = cfg.Rootfs
	}
	p, err := gvisor.New(ctx, providers.Options{RunID: fmt.Sprintf("bench-%d", os.Getpid()), Params: params})
	if err != nil {
		return err
	}
	defer p.Close(context.WithoutCancel(ctx))
	spec := providers.Spec{
		Files:     map[string][]byte{"server.sh": []byte(serverScript), "ask.sh": []byte(askScript)},
		Resources: providers.Resources{MemoryMB: sz.MemoryMB},
	}
	add := func(name, what string, d []time.Duration) {
		o.Measures = append(o.Measures, summarize(platform, sz.Name, name, what, d))
		fmt.Fprintf(os.Stderr, "%s/%s %-15s done (%d samples)\n", platform, sz.Name, name, len(d))
	}
	// cold: what an episode costs without a memory checkpoint.
	cold, err := sampleSandbox(ctx, p, cfg.Cold, func() (providers.Sandbox, error) {
		sb, err := p.Create(ctx, spec)
		if err != nil {
			return nil, err
		}
		for _, c := range append(append([]string{}, sz.Setup...), startCmd) {
			if err := mustExec(ctx, sb, c); err != nil {
				return sb, err
			}
		}
		return sb, ask(ctx, sb, "1")
	})
	if err != nil {
		return fmt.Errorf("cold start: %w", err)
	}
	setupWhat := "setup: none"
	if len(sz.Setup) > 0 {
		setupWhat = "setup: 512 MiB of random bytes into the sandbox's memory-backed files"
	}
	add("cold", fmt.Sprintf("Create + %s + start (sleep 2, then the server) until it answers", setupWhat), cold)

	// The golden: set up, started, asked once, checkpointed.
	golden, err := p.Create(ctx, spec)
	if err != nil {
		return err
	}
	defer golden.Close(context.WithoutCancel(ctx))
	for _, c := range append(append([]string{}, sz.Setup...), startCmd) {
		if err := mustExec(ctx, golden, c); err != nil {
			return err
		}
	}
	if err := ask(ctx, golden, "1"); err != nil {
		return err
	}
	var cps []providers.Checkpoint
	var ckTimes []time.Duration
	for i := 0; i < 3; i++ {
		if i > 0 {
			// The golden acts again, so that the next checkpoint is a
			// real one (not a link of the same image).
			if err := mustExec(ctx, golden, "true"); err != nil {
				return err
			}
		}
		began := time.Now()
		cp, err := p.Checkpoint(ctx, golden, "bench")
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		ckTimes = append(ckTimes, time.Since(began))
		cps = append(cps, cp)
	}
	cp := cps[0]
	for _, c := range cps[1:] {
		_ = p.Release(ctx, c)
	}
	o.ImageBytes = cp.Bytes
	add("checkpoint", fmt.Sprintf("runsc checkpoint of the golden (image %s)", humanBytes(cp.Bytes)), ckTimes)

	restores, err := sampleSandbox(ctx, p, n, func() (providers.Sandbox, error) { return p.Fork(ctx, cp) })
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	add("restore", "Fork: runsc restore of the golden's image", restores)

	answered, err := sampleSandbox(ctx, p, n, func() (providers.Sandbox, error) {
		sb, err := p.Fork(ctx, cp)
		if err != nil {
			return nil, err
		}
		return sb, ask(ctx, sb, "2")
	})
	if err != nil {
		return fmt.Errorf("restore+answer: %w", err)
	}
	add("restore+answer", "Fork, until the restored server answered from its memory (2: the golden asked once)", answered)

	handOffs, cold0, err := poolStandby(ctx, p, spec, sz, n)
	if err != nil {
		return fmt.Errorf("standby: %w", err)
	}
	add("standby", fmt.Sprintf("pool reset with a restored standby replica ready: a hand-off (%d of %d resets; %d found none ready)",
		len(handOffs), len(handOffs)+cold0, cold0), handOffs)

	mid, err := midEpisode(ctx, p, cp, n)
	if err != nil {
		return fmt.Errorf("mid-episode: %w", err)
	}
	add("mid-episode", "checkpoint of a fork mid-episode, and its next answer: runsc checkpoint, then restore of the parent", mid)

	lr, err := leaveRunning(ctx, p, cp)
	switch {
	case err != nil:
		o.Measures = append(o.Measures, measure{Platform: platform, Size: sz.Name, Name: "leave-running", N: 0,
			What: "runsc checkpoint --leave-running of a fork: " + err.Error()})
	default:
		add("leave-running", "runsc checkpoint --leave-running of a fork, until it answers again", []time.Duration{lr})
	}
	for i := range o.Measures {
		if o.Measures[i].P50MS > 0 {
			o.Measures[i].ColdOver = round(o.Measures[0].P50MS/o.Measures[i].P50MS, 2)
		}
	}
	return nil
}

// ask asks sb's server once and checks it answers want.
func ask(ctx context.Context, sb providers.Sandbox, want string) error {
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "sh ask.sh"})
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(obs.Text()); got != want {
		return fmt.Errorf("the server answered %q, want %q", got, want)
	}
	return nil
}

// poolStandby runs n episodes through a pool with one replica and a
// standby of one, as collect -replicas 1 -standby 1 does; each episode
// asks the server once and lasts a second, so the standby can refill.
func poolStandby(ctx context.Context, p providers.Provider, spec providers.Spec, sz size, n int) ([]time.Duration, int, error) {
	pl, err := pool.New(pool.Config{Provider: p, Replicas: 1, Standby: 1, Strategy: pool.Fork})
	if err != nil {
		return nil, 0, err
	}
	defer pl.Close(context.WithoutCancel(ctx))
	t := &pool.Template{Key: "bench-standby-" + sz.Name, Spec: spec, Setup: sz.Setup, Start: []string{startCmd, "sh ask.sh"}, CommandTimeout: 10 * time.Minute}
	if _, err := pl.Golden(ctx, t); err != nil {
		return nil, 0, err
	}
	pl.Expect(ctx, t, n)
	jobs := make(chan pool.Job, n)
	for range n {
		jobs <- pool.Job{Template: t}
	}
	close(jobs)
	var handOffs []time.Duration
	cold := 0
	var episodeErr error
	pl.Run(ctx, jobs, func(ctx context.Context, _ pool.Job, r pool.Replica, err error) pool.Outcome {
		if err == nil {
			err = ask(ctx, r.Sandbox, "2")
		}
		if err != nil {
			if episodeErr == nil {
				episodeErr = err
			}
			return pool.Broken
		}
		if r.Standby {
			handOffs = append(handOffs, r.Reset)
		} else {
			cold++
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		return pool.Done
	})
	if episodeErr == nil {
		episodeErr = ctx.Err()
	}
	if episodeErr == nil && len(handOffs) == 0 {
		episodeErr = fmt.Errorf("no reset found a standby replica ready in %d episodes", n)
	}
	return handOffs, cold, episodeErr
}

// midEpisode times, n times, a checkpoint of a fork that has answered once
// and the fork's next answer (the parent is restored before it).
func midEpisode(ctx context.Context, p providers.Provider, cp providers.Checkpoint, n int) ([]time.Duration, error) {
	f, err := p.Fork(ctx, cp)
	if err != nil {
		return nil, err
	}
	defer f.Close(context.WithoutCancel(ctx))
	var out []time.Duration
	for i := 0; i < n; i++ {
		began := time.Now()
		mid, err := p.Checkpoint(ctx, f, "mid")
		if err != nil {
			return nil, err
		}
		if err := ask(ctx, f, fmt.Sprint(i+2)); err != nil {
			return nil, err
		}
		out = append(out, time.Since(began))
		_ = p.Release(ctx, mid)
	}
	return out, nil
}

// leaveRunning runs runsc checkpoint --leave-running on a fork, in the
// background (in the release Debian ships it re-creates the container and
// then waits on it instead of returning), and times until the fork answers
// again, bounded by 60 s.
func leaveRunning(ctx context.Context, p *gvisor.Provider, cp providers.Checkpoint) (time.Duration, error) {
	f, err := p.Fork(ctx, cp)
	if err != nil {
		return 0, err
	}
	defer f.Close(context.WithoutCancel(ctx))
	if err := ask(ctx, f, "2"); err != nil {
		return 0, err
	}
	img, err := os.MkdirTemp(p.Dir(), "leave-running-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(img)
	_ = os.Remove(img)
	lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	bin, err := exec.LookPath("runsc")
	if err != nil {
		return 0, err
	}
	cid, _ := p.ContainerID(f)
	// The re-created container runs as a new sandbox process: its pid
	// tells it from the one being checkpointed.
	state := func() (status string, pid int) {
		out, _ := exec.CommandContext(lctx, bin, "--root="+p.StateRoot(), "state", cid).Output()
		var st struct {
			Status string `json:"status"`
			Pid    int    `json:"pid"`
		}
		_ = json.Unmarshal(out, &st)
		return st.Status, st.Pid
	}
	_, before := state()
	began := time.Now()
	cmd := exec.CommandContext(lctx, bin, "--root="+p.StateRoot(), "--platform="+p.Platform(),
		"--network=none", "--overlay2=root:memory", "checkpoint", "--leave-running", "--image-path", img, cid)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-waited
	}()
	// Ask only once runsc reports the re-created container running: a
	// runsc exec into it while runsc re-creates it made the checkpoint fail.
	for {
		if status, pid := state(); status == "running" && pid != before && pid > 0 {
			if err := ask(lctx, f, "3"); err != nil {
				return 0, fmt.Errorf("the fork did not answer after runsc re-created it: %w", err)
			}
			return time.Since(began), nil
		}
		select {
		case werr := <-waited:
			waited <- werr
			return 0, fmt.Errorf("runsc checkpoint --leave-running exited (%v) before the container ran again", werr)
		case <-lctx.Done():
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, errors.New("the container did not run again within 60 s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func mustExec(ctx context.Context, sb providers.Sandbox, cmd string) error {
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: cmd, TimeoutMS: 600000})
	if err != nil {
		return err
	}
	if obs.Error {
		return fmt.Errorf("exec %q: exit %d: %s", cmd, obs.ExitCode, obs.Text())
	}
	return nil
}

// sampleSandbox times f n times and closes the sandbox it made, untimed,
// waiting until the provider has deleted it (a gvisor sandbox is deleted
// in the background), so that no sample overlaps the last one's teardown.
func sampleSandbox(ctx context.Context, p *gvisor.Provider, n int, f func() (providers.Sandbox, error)) ([]time.Duration, error) {
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
			_, _ = p.Leftovers(context.WithoutCancel(ctx))
		}
		if err != nil {
			return nil, err
		}
		out = append(out, took)
	}
	return out, nil
}

func summarize(platform, size, name, what string, d []time.Duration) measure {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return measure{Platform: platform, Size: size, Name: name, What: what, N: len(s), P50MS: ms(quantile(s, 0.5)), P95MS: ms(quantile(s, 0.95))}
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

// goalText says whether a fork met the goal of costing a tenth of the cold
// start: restored on demand, or handed off by the standby.
func goalText(cold, answered, standby measure) string {
	switch {
	case cold.P50MS/answered.P50MS >= 10:
		return "met by a fork restored on demand"
	case standby.N > 0 && cold.P50MS/standby.P50MS >= 10:
		return "not met by a fork restored on demand; met by the standby's hand-off"
	case standby.N > 0:
		return "not met, also not by the standby (it did not keep up: a restore took longer than an episode here)"
	}
	return "not met"
}

func fmtMS(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
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

func printTable(w io.Writer, rep *report) {
	for _, o := range rep.Outcomes {
		fmt.Fprintf(w, "== %s / %s (image %s, load %s)\n", o.Platform, o.Size, humanBytes(o.ImageBytes), strings.Join(o.Load, " → "))
		if o.Error != "" {
			fmt.Fprintf(w, "   failed: %s\n", o.Error)
		}
		for _, m := range o.Measures {
			fmt.Fprintf(w, "   %-15s %4d %10.1f %10.1f %8.2f  %s\n", m.Name, m.N, m.P50MS, m.P95MS, m.ColdOver, m.What)
		}
	}
}

func markdown(rep *report) string {
	var b strings.Builder
	m := rep.Machine
	fmt.Fprintf(&b, "# gvisor provider: memory checkpoints, restores, cold starts\n\n")
	fmt.Fprintf(&b, "Command: `%s`  \n", rep.Command)
	fmt.Fprintf(&b, "Date: %s  \n", rep.Date.Format(time.RFC3339))
	fmt.Fprintf(&b, "Machine: %s, kernel %s, %d × %s, %d MiB; %s; /dev/kvm %s; %s  \n",
		m.OS, m.Kernel, m.CPUs, m.CPU, m.MemoryMB, m.Runsc, map[bool]string{true: "present", false: "absent"}[m.KVM], m.Go)
	fmt.Fprintf(&b, "Root filesystem: %s\n\n", rep.Rootfs)
	for _, o := range rep.Outcomes {
		fmt.Fprintf(&b, "## %s, %s sandbox\n\n", o.Platform, o.Size)
		fmt.Fprintf(&b, "Load average (1 min): %s  \n", strings.Join(o.Load, " at the start, ")+" at the end")
		if o.Error != "" {
			fmt.Fprintf(&b, "Did not run: %s\n\n", o.Error)
			continue
		}
		fmt.Fprintf(&b, "Checkpoint image: %s\n\n", humanBytes(o.ImageBytes))
		by := map[string]measure{}
		for _, x := range o.Measures {
			by[x.Name] = x
		}
		cold, restore, answered, standby := by["cold"], by["restore"], by["restore+answer"], by["standby"]
		if cold.P50MS > 0 && restore.P50MS > 0 && answered.P50MS > 0 {
			fmt.Fprintf(&b, "A fork whose server has answered costs %s ms where the cold start costs %s ms: **%.1f× cheaper** "+
				"(the restore alone %.1f×); with a standby restore made ahead the episode waits %s ms. "+
				"Goals: a fork ≥ 10× cheaper than the cold start — %s; restore p50 ≤ 300 ms on an idle machine — "+
				"the restore p50 is %s ms at a load average of %s to %s on %d cores, not idle.\n\n",
				fmtMS(answered.P50MS), fmtMS(cold.P50MS), cold.P50MS/answered.P50MS, cold.P50MS/restore.P50MS, fmtMS(standby.P50MS),
				goalText(cold, answered, standby),
				fmtMS(restore.P50MS), o.Load[0], o.Load[len(o.Load)-1], rep.Machine.CPUs)
		}
		fmt.Fprintf(&b, "| measure | what | n | p50 ms | p95 ms | cold p50 / p50 |\n|---|---|---:|---:|---:|---:|\n")
		for _, x := range o.Measures {
			ratio := "–"
			switch {
			case x.ColdOver >= 1000:
				ratio = "> 1000"
			case x.ColdOver > 0:
				ratio = fmt.Sprintf("%.2f", x.ColdOver)
			}
			if x.N == 0 {
				fmt.Fprintf(&b, "| %s | %s | 0 | – | – | – |\n", x.Name, x.What)
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s |\n", x.Name, x.What, x.N, fmtMS(x.P50MS), fmtMS(x.P95MS), ratio)
		}
		b.WriteString("\n")
	}
	b.WriteString(`Samples run one after another in one process. "cold" is what an episode costs without a
memory checkpoint: a fresh sandbox, the task's setup and its start (about 2 s), until the server
answers. "restore" ends when runsc restore has returned; "restore+answer" when the restored
server has answered a request from the memory the golden left it (the reset an episode waits for).
"standby" is the pool's reset when a restored replica was ready (collect -standby). "mid-episode"
is a branch point of a running fork plus the fork's next answer, since the fork is restored
before it acts again; "leave-running" is runsc's own way, which in Debian's release re-creates
the container and waits on it instead of returning. The machine's load changes every number;
the ratios within one section are the ones to compare.
`)
	return b.String()
}

func describeMachine(ctx context.Context) machine {
	m := machine{CPUs: goruntime.NumCPU(), Go: goruntime.Version()}
	if _, err := os.Stat("/dev/kvm"); err == nil {
		m.KVM = true
	}
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
	if out, err := exec.CommandContext(ctx, "runsc", "--version").Output(); err == nil {
		m.Runsc, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	return m
}
