// Command throughput measures the collector end to end on the local
// provider, as a user runs it: steps per second at 1, 2, 4 and 8 replicas, and
// the collector's peak resident memory for a small and a large run, to show
// that memory does not grow with the number of episodes.
//
//	go run ./benchmarks/throughput            # defaults: 100 vs 2000 episodes
//	go run ./benchmarks/throughput -json out.json
//
// It builds cmd/forkline, runs forkline collect as a child process per measurement (so the
// peak RSS is the collector's own, from rusage), and reads the summary that
// collect prints with -json. Numbers are medians of -runs runs.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

const task = `id: bench
instruction: a short multi-step shell episode
setup:
  - mkdir -p data && for i in 1 2 3 4 5 6 7 8 9 10; do echo "line $i" > data/f$i.txt; done
solution:
  - {kind: exec, cmd: ls data | wc -l}
  - {kind: read_file, path: data/f3.txt}
  - {kind: write_file, path: out.txt, content: "result\n"}
  - {kind: exec, cmd: cat data/*.txt | grep -c line}
  - {kind: done, answer: ok}
verify:
  cmd: test -f out.txt
`

type result struct {
	Replicas    int     `json:"replicas"`
	Episodes    int     `json:"episodes"`
	StepsPerSec float64 `json:"steps_per_s"`
	PeakRSSMB   float64 `json:"peak_rss_mb"`
	WallSec     float64 `json:"wall_s"`
}

func main() {
	runs := flag.Int("runs", 3, "runs per measurement (median reported)")
	episodes := flag.Int("episodes", 400, "episodes per throughput measurement")
	small := flag.Int("small", 100, "episodes of the small memory run")
	large := flag.Int("large", 2000, "episodes of the large memory run")
	jsonOut := flag.String("json", "", "also write results to `FILE`")
	flag.Parse()

	tmp, err := os.MkdirTemp("", "forkline-throughput-")
	check(err)
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "forkline")
	out, err := exec.Command("go", "build", "-o", bin, "./cmd/forkline").CombinedOutput()
	if err != nil {
		fatal("building collect: %v\n%s", err, out)
	}
	spec := filepath.Join(tmp, "bench.yaml")
	check(os.WriteFile(spec, []byte(task), 0o644))

	fmt.Printf("forkline throughput benchmark — %s, %d cores, %s, %s\n", kernel(), runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("task: 4 actions + done + verify per episode; local provider, overlay forks; median of %d runs\n\n", *runs)
	var all []result
	fmt.Printf("%-9s %-9s %12s %14s\n", "replicas", "episodes", "steps/s", "peak RSS MB")
	var base float64
	for _, n := range []int{1, 2, 4, 8} {
		r := median(*runs, func() result { return collect(bin, spec, tmp, n, *episodes) })
		if n == 1 {
			base = r.StepsPerSec
		}
		fmt.Printf("%-9d %-9d %12.1f %14.1f   (%.2fx of 1 replica)\n", n, r.Episodes, r.StepsPerSec, r.PeakRSSMB, r.StepsPerSec/base)
		all = append(all, r)
	}
	fmt.Println()
	s := median(*runs, func() result { return collect(bin, spec, tmp, 4, *small) })
	l := median(*runs, func() result { return collect(bin, spec, tmp, 4, *large) })
	fmt.Printf("peak RSS, 4 replicas: %d episodes %.1f MB, %d episodes %.1f MB (ratio %.2f)\n",
		s.Episodes, s.PeakRSSMB, l.Episodes, l.PeakRSSMB, l.PeakRSSMB/s.PeakRSSMB)
	all = append(all, s, l)
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(all, "", "  ")
		check(os.WriteFile(*jsonOut, data, 0o644))
	}
}

func collect(bin, spec, tmp string, replicas, episodes int) result {
	out := filepath.Join(tmp, fmt.Sprintf("run-%d-%d-%d", replicas, episodes, time.Now().UnixNano()))
	defer os.RemoveAll(out)
	cmd := exec.Command(bin, "collect", "-tasks", spec, "-out", out, "-replicas", fmt.Sprint(replicas),
		"-repeats", fmt.Sprint(episodes), "-workdir", tmp, "-quiet", "-json")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.Output()
	if err != nil {
		fatal("collect: %v", err)
	}
	var sum struct {
		Episodes    int     `json:"episodes"`
		StepsPerSec float64 `json:"steps_per_s"`
		WallSec     float64 `json:"wall_s"`
	}
	check(json.Unmarshal(stdout, &sum))
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return result{Replicas: replicas, Episodes: sum.Episodes, StepsPerSec: sum.StepsPerSec,
		PeakRSSMB: float64(ru.Maxrss) / 1024, WallSec: sum.WallSec}
}

func median(n int, f func() result) result {
	rs := make([]result, n)
	for i := range rs {
		rs[i] = f()
	}
	sort.Slice(rs, func(a, b int) bool { return rs[a].StepsPerSec < rs[b].StepsPerSec })
	m := rs[n/2]
	rss := make([]float64, n)
	for i, r := range rs {
		rss[i] = r.PeakRSSMB
	}
	sort.Float64s(rss)
	m.PeakRSSMB = rss[n/2]
	return m
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return "Linux " + strings.TrimSpace(string(b))
}

func check(err error) {
	if err != nil {
		fatal("%v", err)
	}
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "throughput: "+format+"\n", args...)
	os.Exit(1)
}
