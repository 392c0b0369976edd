// Command serve benchmarks forkline serve's reset latency as a trainer sees
// it: S concurrent OpenEnv sessions (the client in serve/openenvtest, over
// loopback), each playing R episodes of one task — a reset, then a few
// steps with a think time between them, as a trainer's model generates —
// against three servers run one after another in one process, on one
// provider:
//
//   - recreate: every reset makes a fresh sandbox and replays the task's
//     setup (-reset recreate): what a server that cannot fork does (the
//     peers' way: a new environment per episode);
//   - fork: every reset forks the golden checkpoint (-standby 0);
//   - standby: every reset is a hand-off of a fork made in the background
//     (-standby K).
//
// The latency is the client's: from sending the reset message to reading
// its observation. Each is printed with its p50 and p95 and its p50 as a
// ratio to recreate's. -md writes the Markdown report
// (benchmarks/serve/RESULTS.md) with the command, date and machine.
//
//	go run ./benchmarks/serve -md benchmarks/serve/RESULTS.md
//	go run ./benchmarks/serve -provider docker -provider-opt image=forkline/busybox
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forkline/forkline/pool"
	_ "github.com/forkline/forkline/providers/all" // serve opens the provider by name
	"github.com/forkline/forkline/serve"
	"github.com/forkline/forkline/serve/openenvtest"
)

// defaultSetup is the task's setup: real work that leaves files behind,
// as installing a repository's dependencies does (300 files of 4 KiB,
// one process each).
const defaultSetup = `i=0; while [ $i -lt 300 ]; do head -c 4096 /dev/urandom > dep$i.bin; i=$((i+1)); done`

type config struct {
	Provider    string
	Params      multi
	Sessions    int
	Episodes    int
	Steps       int
	Think       time.Duration
	Standby     int
	Setup       string
	MDPath      string
	RecreateEps int
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// measure is one server's resets.
type measure struct {
	Name  string
	What  string
	N     int
	P50   float64
	P95   float64
	Ratio float64
	Kinds string // how the server says it reset (its summary)
	// TripP50 and TripP95 are a state message's round trip in the same
	// sessions: the protocol's floor under every reset.
	TripP50, TripP95 float64
	Took             time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.Provider, "provider", "local", "provider")
	flag.Var(&cfg.Params, "provider-opt", "provider setting key=value (repeatable)")
	flag.IntVar(&cfg.Sessions, "sessions", 8, "concurrent sessions")
	flag.IntVar(&cfg.Episodes, "episodes", 10, "episodes per session (fork and standby)")
	flag.IntVar(&cfg.RecreateEps, "recreate-episodes", 3, "episodes per session against the recreating server (each replays the setup)")
	flag.IntVar(&cfg.Steps, "steps", 3, "steps per episode (the last is done)")
	flag.DurationVar(&cfg.Think, "think", 100*time.Millisecond, "the client's think time before each step (a model generating)")
	flag.IntVar(&cfg.Standby, "standby", 0, "standby forks per task for the standby server (default: -sessions)")
	flag.StringVar(&cfg.Setup, "setup", defaultSetup, "the task's setup command")
	flag.StringVar(&cfg.MDPath, "md", "", "write the Markdown report here")
	flag.Parse()
	if cfg.Standby == 0 {
		cfg.Standby = cfg.Sessions
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks/serve:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	dir, err := os.MkdirTemp("", "bench-serve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	spec := filepath.Join(dir, "task.yaml")
	task := fmt.Sprintf("id: bench\ninstruction: read a dependency and finish\nsetup: [%q]\nverify: {cmd: test -f dep0.bin}\nlimits: {max_steps: %d}\n", cfg.Setup, cfg.Steps+1)
	if err := os.WriteFile(spec, []byte(task), 0o644); err != nil {
		return err
	}
	loadBefore := loadAvg()
	began := time.Now()
	var rows []measure
	for _, srv := range []struct {
		name, what string
		reset      pool.Strategy
		standby    int
		episodes   int
	}{
		{"recreate", "a fresh sandbox and the setup replayed per reset (-reset recreate)", pool.Recreate, 0, cfg.RecreateEps},
		{"fork", "a fork of the golden checkpoint per reset (-standby 0)", pool.Fork, 0, cfg.Episodes},
		{"standby", fmt.Sprintf("a hand-off of a fork made ahead (-standby %d)", cfg.Standby), pool.Fork, cfg.Standby, cfg.Episodes},
	} {
		m, err := measureServer(ctx, cfg, dir, spec, srv.reset, srv.standby, srv.episodes)
		if err != nil {
			return fmt.Errorf("%s: %w", srv.name, err)
		}
		m.Name, m.What = srv.name, srv.what
		rows = append(rows, m)
		fmt.Fprintf(os.Stderr, "%s: p50 %.3f ms p95 %.3f ms (n=%d; server: %s)\n", m.Name, m.P50, m.P95, m.N, m.Kinds)
	}
	for i := range rows {
		rows[i].Ratio = rows[i].P50 / rows[0].P50
	}
	report := markdown(cfg, rows, loadBefore, loadAvg(), time.Since(began))
	io.WriteString(w, report)
	if cfg.MDPath != "" {
		return os.WriteFile(cfg.MDPath, []byte(report), 0o644)
	}
	return nil
}

// measureServer runs one server and the sessions against it, and returns
// the client-side reset latencies.
func measureServer(ctx context.Context, cfg config, dir, spec string, reset pool.Strategy, standby, episodes int) (measure, error) {
	params := map[string]string{}
	for _, kv := range cfg.Params {
		k, v, _ := strings.Cut(kv, "=")
		params[k] = v
	}
	work, err := os.MkdirTemp(dir, "work-")
	if err != nil {
		return measure{}, err
	}
	ready := make(chan string, 1)
	sctx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	type result struct {
		sum *serve.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := serve.Run(sctx, serve.Config{Tasks: spec, Provider: cfg.Provider, ProviderParams: params, Reset: reset, Standby: standby,
			WorkDir: work, Addr: "127.0.0.1:0", MaxSessions: cfg.Sessions, Ready: func(a net.Addr) { ready <- "http://" + a.String() }})
		done <- result{sum, err}
	}()
	var base string
	select {
	case base = <-ready:
	case r := <-done:
		return measure{}, fmt.Errorf("the server did not start: %v", r.err)
	}
	// Build the golden (and, with standby, the first forks) before the
	// clock runs: a trainer's server is up before training starts.
	warm, err := openenvtest.Dial(base)
	if err != nil {
		return measure{}, err
	}
	if _, err := warm.Reset(nil); err != nil {
		return measure{}, err
	}
	warm.Disconnect()
	time.Sleep(time.Second)

	began := time.Now()
	lat := make([][]float64, cfg.Sessions)
	rtt := make([][]float64, cfg.Sessions)
	errs := make([]error, cfg.Sessions)
	var wg sync.WaitGroup
	for i := range cfg.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat[i], rtt[i], errs[i] = playSession(base, cfg, episodes)
		}()
	}
	wg.Wait()
	took := time.Since(began)
	stopServer()
	r := <-done
	for _, err := range append(errs, r.err) {
		if err != nil {
			return measure{}, err
		}
	}
	var all, trips []float64
	for i := range lat {
		all = append(all, lat[i]...)
		trips = append(trips, rtt[i]...)
	}
	sort.Float64s(all)
	sort.Float64s(trips)
	var kinds []string
	for _, l := range r.sum.ResetLatency {
		kinds = append(kinds, fmt.Sprintf("%s n=%d p50 %.3f ms", l.Kind, l.N, l.P50))
	}
	return measure{N: len(all), P50: pct(all, 0.50), P95: pct(all, 0.95), Kinds: strings.Join(kinds, "; "), Took: took,
		TripP50: pct(trips, 0.50), TripP95: pct(trips, 0.95)}, nil
}

// playSession plays episodes as a trainer would and returns each reset's
// latency in ms, and before each a state message's round trip.
func playSession(base string, cfg config, episodes int) (resets, trips []float64, err error) {
	c, err := openenvtest.Dial(base)
	if err != nil {
		return nil, nil, err
	}
	defer c.Disconnect()
	var out []float64
	for range episodes {
		t := time.Now()
		if _, err := c.State(); err != nil {
			return nil, nil, err
		}
		trips = append(trips, float64(time.Since(t))/float64(time.Millisecond))
		t = time.Now()
		if _, err := c.Reset(nil); err != nil {
			return nil, nil, err
		}
		out = append(out, float64(time.Since(t))/float64(time.Millisecond))
		for s := range cfg.Steps {
			time.Sleep(cfg.Think)
			a := map[string]any{"kind": "exec", "cmd": "wc -c dep0.bin"}
			if s == cfg.Steps-1 {
				a = map[string]any{"kind": "done"}
			}
			r, err := c.Step(a)
			if err != nil {
				return nil, nil, err
			}
			if s == cfg.Steps-1 && (!r.Done || r.Reward == nil || *r.Reward != 1) {
				return nil, nil, fmt.Errorf("the episode did not end done with reward 1: %+v", r)
			}
		}
	}
	return out, trips, nil
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func markdown(cfg config, rows []measure, loadBefore, loadAfter string, took time.Duration) string {
	var b strings.Builder
	args := strings.Join(os.Args[1:], " ")
	fmt.Fprintf(&b, "# forkline serve: reset latency as a trainer sees it\n\n")
	fmt.Fprintf(&b, "Command: `go run ./benchmarks/serve %s`  \n", args)
	fmt.Fprintf(&b, "Date: %s  \n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Machine: %s, %d cores; %s  \n", osName(), goruntime.NumCPU(), goruntime.Version())
	fmt.Fprintf(&b, "Load average (1 min): %s at the start, %s at the end; the run took %s  \n", loadBefore, loadAfter, took.Round(time.Second))
	fmt.Fprintf(&b, "Provider: %s %s; %d concurrent sessions; %d steps per episode, %s think time before each; task setup: `%s`\n\n",
		cfg.Provider, strings.Join(cfg.Params, " "), cfg.Sessions, cfg.Steps, cfg.Think, cfg.Setup)
	fmt.Fprintf(&b, "| server | each reset is | resets | p50 ms | p95 ms | p50 / recreate | state round trip p50 / p95 ms |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %.3f | %.3f | %s | %.3f / %.3f |\n", r.Name, r.What, r.N, r.P50, r.P95, ratio(r.Ratio), r.TripP50, r.TripP95)
	}
	fmt.Fprintf(&b, "\nAs the servers measured them (reset kind, n, p50):\n\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "- %s: %s\n", r.Name, r.Kinds)
	}
	fmt.Fprintf(&b, `
The latency is the client's: from sending {"type": "reset"} over the WebSocket to reading the
observation, through forkline serve's whole path (session, pool, provider, loopback); the last
column is a {"type": "state"} message's round trip in the same sessions, the floor under any reset. The three
servers ran one after another in one process, each with the same sessions and task, after one warm-up
reset built the golden checkpoint (and let the standby fill): the ratios within one run are the
numbers to compare, not the absolute times across machines. The recreating server plays fewer
episodes per session because each replays the setup. The standby server keeps up while a session's
episode (steps × think time) lasts longer than making a fork; a burst of resets larger than the
standby waits for forks.
`)
	return b.String()
}

func ratio(r float64) string {
	if r < 0.001 {
		return "<0.001"
	}
	return fmt.Sprintf("%.3f", r)
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func osName() string {
	out, err := exec.Command("sh", "-c", `. /etc/os-release && echo "$PRETTY_NAME"; uname -r`).Output()
	if err != nil {
		return goruntime.GOOS
	}
	parts := strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", " "))
	return strings.Join(parts, " ")
}
