// Command scale measures how the collector scales when episodes are bound
// by a model, not by the sandbox: replicas 1, 4, 16, 64 and 256 on the
// local provider against a loopback OpenAI-compatible server that answers
// every chat completion after a fixed latency (1 s by default), with a
// tool call (exec, then done on the last step).
//
//	go run ./benchmarks/scale                      # 1,4,16,64,256 replicas, 1s latency, 5 steps
//	go run ./benchmarks/scale -replicas 1,16 -rounds 2
//
// The ideal is replicas / episode length (steps × latency): every replica
// waiting on the model all the time. For each replica count it reports
// episodes/s and its ratio to the ideal, the collector's own CPU seconds
// per step (getrusage RUSAGE_SELF of the collecting process: its
// goroutines, the HTTP client, the Parquet writer — not the commands the
// sandboxes run, which are its children, nor the model server, which is
// another process), the CPU of those commands per step (RUSAGE_CHILDREN),
// the machine's CPU use during the run (from
// /proc/stat), and the collector's peak RSS (VmHWM) overall and per
// replica. Each measurement runs in a fresh process (this program run
// again with -child), so a peak RSS is that run's own.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/manifest"
	_ "github.com/forkline/forkline/policy/all"    // the program chooses the backends
	_ "github.com/forkline/forkline/providers/all" // collect opens by name
)

func main() {
	serve := flag.String("serve", "", "child: serve the model on `ADDR`")
	child := flag.Int("child", 0, "child: collect with `N` replicas and print the result as JSON")
	base := flag.String("base-url", "", "child: the model server's /v1 URL")
	replicas := flag.String("replicas", "1,4,16,64,256", "replica counts to measure")
	latency := flag.Duration("latency", time.Second, "the model server's answer latency")
	steps := flag.Int("steps", 5, "steps per episode (the last is done)")
	rounds := flag.Int("rounds", 3, "episodes per replica in each measurement")
	jsonOut := flag.String("json", "", "also write the results to `FILE`")
	cpuProfile := flag.String("cpuprofile", "", "child: write a CPU profile of the collection to `FILE`")
	standby := flag.Int("standby", collect.StandbyAuto, "the collector's standby: -1 sized to the run (the default), 0 none, K per task")
	shell := flag.String("shell", "", "the tasks' shell: fresh (the default: a shell per command) or persistent (one per episode)")
	workdir := flag.String("workdir", "", "where the sandboxes (and the dataset) live: a directory made in `DIR` (default: the system's temporary directory, as forkline collect's -workdir)")
	minOfIdeal := flag.Float64("min-of-ideal", 0, "fail (exit 1) when a measurement reaches less than this `FRACTION` of the ideal: the regression guard CI runs")
	flag.Parse()

	switch {
	case *serve != "":
		serveModel(*serve, *latency, *steps)
		return
	case *child > 0:
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			check(err)
			check(pprof.StartCPUProfile(f))
			defer pprof.StopCPUProfile()
		}
		r, err := collectOnce(*child, *rounds, *standby, *shell, *workdir, *base)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			pprof.StopCPUProfile()
			os.Exit(1)
		}
		json.NewEncoder(os.Stdout).Encode(r)
		return
	}

	self, err := os.Executable()
	check(err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	addr := ln.Addr().String()
	ln.Close()
	srv := exec.Command(self, "-serve", addr, "-latency", latency.String(), "-steps", strconv.Itoa(*steps))
	srv.Stderr = os.Stderr
	check(srv.Start())
	defer srv.Process.Kill()
	waitListening(addr)

	load0 := loadavg()
	fmt.Printf("forkline scale benchmark — %s, %d cores, %s, %s\n", kernel(), runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02"))
	where := *workdir
	if where == "" {
		where = os.TempDir()
	}
	sh := *shell
	if sh == "" {
		sh = "fresh"
	}
	fmt.Printf("model: loopback OpenAI-compatible server (its own process), answers after %s; %d steps per episode (%d exec + done); %d episodes per replica; local provider, sandboxes under %s (%s), %s shell\n",
		*latency, *steps, *steps-1, *rounds, where, fsType(where), sh)
	fmt.Printf("load average before: %s\n\n", load0)
	fmt.Printf("%-9s %-9s %9s %12s %10s %8s %14s %15s %12s %13s %12s\n", "replicas", "episodes", "wall s", "episodes/s", "ideal", "of ideal", "CPU s/step", "commands s/step", "machine CPU", "peak RSS MB", "RSS/replica")
	var all []result
	for _, f := range strings.Split(*replicas, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		check(err)
		cpu0 := machineCPU()
		out, err := exec.Command(self, "-child", strconv.Itoa(n), "-rounds", strconv.Itoa(*rounds), "-standby", strconv.Itoa(*standby), "-shell", *shell, "-workdir", *workdir, "-base-url", "http://"+addr+"/v1").Output()
		if err != nil {
			srv.Process.Kill()
			fatal("collect with %d replicas: %v\n%s", n, err, out)
		}
		cpu1 := machineCPU()
		var r result
		check(json.Unmarshal(out, &r))
		r.Ideal = float64(n) / (float64(*steps) * latency.Seconds())
		r.OfIdeal = r.EpisodesPerSec / r.Ideal
		r.MachineCPU = cpu1.busyFraction(cpu0)
		fmt.Printf("%-9d %-9d %9.1f %12.2f %10.2f %7.1f%% %14.6f %15.6f %11.0f%% %13.1f %12.2f\n", n, r.Episodes, r.WallSec, r.EpisodesPerSec, r.Ideal, 100*r.OfIdeal,
			r.CPUPerStep, r.CommandsCPUPerStep, 100*r.MachineCPU, r.PeakRSSMB, r.PeakRSSMB/float64(n))
		fmt.Printf("%-9s resets waited for: %s\n", "", resetLine(r.ResetMS))
		all = append(all, r)
	}
	fmt.Printf("\nload average after: %s\n", loadavg())
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(all, "", "  ")
		check(os.WriteFile(*jsonOut, append(data, '\n'), 0o644))
	}
	// The guard is a ratio measured in this run against this run's ideal,
	// never an absolute time: a slower machine moves both sides.
	for _, r := range all {
		if *minOfIdeal > 0 && r.OfIdeal < *minOfIdeal {
			srv.Process.Kill() // fatal exits without running the deferred kill
			fatal("scale guard: %d replicas reached %.1f%% of the ideal, below the bound of %.1f%%", r.Replicas, 100*r.OfIdeal, 100**minOfIdeal)
		}
	}
	if *minOfIdeal > 0 {
		fmt.Printf("scale guard: every measurement at or above %.1f%% of the ideal\n", 100**minOfIdeal)
	}
}

type result struct {
	Replicas       int     `json:"replicas"`
	Episodes       int     `json:"episodes"`
	Steps          int64   `json:"steps"`
	WallSec        float64 `json:"wall_s"`
	EpisodesPerSec float64 `json:"episodes_per_s"`
	Ideal          float64 `json:"ideal_episodes_per_s"`
	OfIdeal        float64 `json:"of_ideal"`
	CPUSec         float64 `json:"collector_cpu_s"`
	CPUPerStep     float64 `json:"collector_cpu_s_per_step"`
	CommandsCPUSec float64 `json:"commands_cpu_s"`
	// CommandsCPUPerStep is the sandboxes' commands' CPU per step.
	CommandsCPUPerStep float64 `json:"commands_cpu_s_per_step"`
	MachineCPU         float64 `json:"machine_cpu_busy"`
	PeakRSSMB          float64 `json:"peak_rss_mb"`
	Losses             int     `json:"scaffold_losses"`
	// ResetMS is what the episodes waited for their replica, by kind
	// (a hand-off from the standby, a fork made while the episode waited).
	ResetMS map[string]manifest.Latency `json:"reset_ms"`
}

// collectOnce runs one collection in this process and measures it.
func collectOnce(replicas, rounds, standby int, shell, workdir, baseURL string) (result, error) {
	tmp, err := os.MkdirTemp(workdir, "forkline-scale-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(tmp)
	spec := filepath.Join(tmp, "scale.yaml")
	if err := os.WriteFile(spec, []byte("id: scale\ninstruction: run the commands the model asks for\n"), 0o644); err != nil {
		return result{}, err
	}
	var ru0, kids0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids0)
	// The command's defaults (a standby sized to the run among them), so
	// the figures are what forkline collect gives without tuning.
	cfg := collect.DefaultConfig()
	cfg.Tasks, cfg.Out, cfg.WorkDir, cfg.Replicas, cfg.Repeats = spec, filepath.Join(tmp, "run"), tmp, replicas, replicas*rounds
	cfg.Standby, cfg.Shell = standby, shell
	cfg.Policy, cfg.PolicyOptions = "openai", map[string]string{"base_url": baseURL, "model": "scale", "timeout": "60s"}
	sum, err := collect.Run(context.Background(), cfg)
	if err != nil {
		return result{}, err
	}
	var ru1, kids1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids1)
	rep := sum.Report()
	cpu := tv(ru1.Utime) + tv(ru1.Stime) - tv(ru0.Utime) - tv(ru0.Stime)
	// The commands the sandboxes ran are this process's children (waited
	// for, so counted): what the steps cost the machine besides the
	// collector itself.
	kids := tv(kids1.Utime) + tv(kids1.Stime) - tv(kids0.Utime) - tv(kids0.Stime)
	r := result{Replicas: replicas, Episodes: rep.Ran, Steps: rep.RanSteps, WallSec: rep.WallSec, EpisodesPerSec: rep.EpisodesPerSec,
		CPUSec: cpu, CommandsCPUSec: kids, PeakRSSMB: vmHWM() / 1024, Losses: rep.Losses, ResetMS: rep.ResetMS}
	if rep.RanSteps > 0 {
		r.CPUPerStep = cpu / float64(rep.RanSteps)
		r.CommandsCPUPerStep = kids / float64(rep.RanSteps)
	}
	if rep.Losses > 0 {
		return r, fmt.Errorf("scale: %d scaffold losses: %v", rep.Losses, rep.Errors)
	}
	return r, nil
}

// resetLine says what the episodes waited for their replica, by kind:
// how many, p50 and p95 in ms.
func resetLine(m map[string]manifest.Latency) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		l := m[k]
		parts = append(parts, fmt.Sprintf("%s n=%d p50 %.3f ms p95 %.3f ms", k, l.N, l.P50, l.P95))
	}
	if len(parts) == 0 {
		return "none recorded"
	}
	return strings.Join(parts, "; ")
}

// fsType names the filesystem dir is on, from /proc/self/mountinfo (the
// longest mount point that holds dir): a fork is a mount and a teardown
// a tree removal there, so the filesystem is part of what is measured.
func fsType(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "?"
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "?"
	}
	best, kind := -1, "?"
	for _, line := range strings.Split(string(data), "\n") {
		// ID parent major:minor root mountpoint options... - fstype source
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if len(f) < 5 || sep < 0 || sep+1 >= len(f) {
			continue
		}
		mp := f[4]
		if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
			best, kind = len(mp), f[sep+1]
		}
	}
	return kind
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// vmHWM is this process's peak resident set in KiB.
func vmHWM() float64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb
		}
	}
	return 0
}

// serveModel answers chat completions after latency: exec of a command on
// every step but the last, then done. The step is the number of assistant
// turns in the request, so the server keeps no state.
func serveModel(addr string, latency time.Duration, steps int) {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		turn := 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				turn++
			}
		}
		time.Sleep(latency)
		name, args := "exec", fmt.Sprintf(`{"cmd":"echo step %d"}`, turn)
		if turn >= steps-1 {
			name, args = "done", `{"answer":"ok"}`
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-scale", "object": "chat.completion", "model": "scale",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{
				"role": "assistant", "content": nil,
				"tool_calls": []any{map[string]any{"id": fmt.Sprint("call_", turn), "type": "function",
					"function": map[string]any{"name": name, "arguments": args}}},
			}}},
			"usage": map[string]any{"prompt_tokens": 100 + 20*turn, "completion_tokens": 12, "total_tokens": 112 + 20*turn},
		})
	})
	s := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	check(s.ListenAndServe())
}

func waitListening(addr string) {
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	fatal("the model server did not start on %s", addr)
}

// cpuTimes are the machine's jiffies from /proc/stat.
type cpuTimes struct{ busy, total float64 }

func machineCPU() cpuTimes {
	f, err := os.Open("/proc/stat")
	check(err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	fields := strings.Fields(sc.Text())[1:]
	var t cpuTimes
	for i, v := range fields {
		x, _ := strconv.ParseFloat(v, 64)
		t.total += x
		if i != 3 && i != 4 { // idle, iowait
			t.busy += x
		}
	}
	return t
}

func (c cpuTimes) busyFraction(before cpuTimes) float64 {
	if c.total == before.total {
		return 0
	}
	return (c.busy - before.busy) / (c.total - before.total)
}

func loadavg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func kernel() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return "linux"
	}
	b := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return "linux " + string(b)
}

func check(err error) {
	if err != nil {
		fatal("%v", err)
	}
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "scale: "+format+"\n", args...)
	os.Exit(1)
}
