// Command export measures forkline export on large datasets against DuckDB
// copying the same native shards to Parquet, in the same run: it makes
// datasets of -episodes sizes (each once, kept in -data for the next run),
// exports each to every target with the forkline binary, and runs the DuckDB baseline
// (benchmarks/export/duckdb, a module of its own: forkline's module never
// depends on cgo DuckDB) on the same shards. It reports rows/s and peak
// RSS (each run a child process; its own rusage), and the ratio of each
// export's time to DuckDB's.
//
//	go run ./benchmarks/export                        # 10,000 and 100,000 episodes
//	go run ./benchmarks/export -episodes 100000,1000000 -data /tmp/exportbench
//	go run ./benchmarks/export -episodes 100000 -repeat 3   # the median of three runs of each
//
// The datasets are generated (benchmarks/datagen: four shell tasks, three
// steps an episode, written through collect's own row and shard code), a
// million episodes in minutes; -collect collects them instead with forkline
// collect and a scripted policy (about 500 episodes a minute on a loaded
// 2-core machine; one task, the outputs a few bytes). The token targets
// (verl-agent, sft-tokens) need token records: they are measured on a
// second generated dataset whose steps carry model turns with token ids,
// with DuckDB copying that one too (not with -collect, whose scripted
// episodes have none).
//
// With -max-cpu-ratio it is a regression guard (make bench-guard): it fails
// when an export's CPU seconds exceed that multiple of DuckDB's in the same
// run — a ratio, never an absolute time, so a slower or busier machine
// does not fail it.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/forkline/forkline/benchmarks/datagen"
)

type run struct {
	What      string  `json:"what"`
	Episodes  int     `json:"episodes"`
	Rows      int64   `json:"rows"`
	StepRows  int64   `json:"step_rows,omitempty"`
	WallSec   float64 `json:"wall_s"`
	RowsPerS  float64 `json:"rows_per_s"`
	CPUSec    float64 `json:"cpu_s"`
	PeakRSSMB float64 `json:"peak_rss_mb"`
	OfDuckDB  float64 `json:"time_over_duckdb"`
	// CPUOfDuckDB is the ratio of CPU seconds (user + system): on a
	// machine other work shares, the wall times depend on the share each
	// process got, its CPU much less.
	CPUOfDuckDB float64 `json:"cpu_over_duckdb"`
}

func main() {
	sizes := flag.String("episodes", "10000,100000", "the datasets' sizes, in episodes")
	data := flag.String("data", filepath.Join(os.TempDir(), "forkline-export-bench"), "where the datasets are kept between runs")
	targets := flag.String("to", "jsonl,chat-jsonl,hf,hf-disk,verl-sft,verl-agent,sft-tokens", "export targets (verl-agent and sft-tokens on a dataset with token records)")
	collectIt := flag.Bool("collect", false, "collect the datasets with forkline collect (one scripted task) instead of generating them")
	jsonOut := flag.String("json", "", "also write the results to `FILE`")
	given := flag.String("bin", "", "measure this forkline binary instead of building ./cmd/forkline (to compare builds)")
	maxRatio := flag.Float64("max-cpu-ratio", 0, "fail when an export's CPU seconds exceed this multiple of DuckDB's (0: report only)")
	repeat := flag.Int("repeat", 1, "run each export and each DuckDB copy `N` times and report the run of median CPU (DuckDB's CPU for the same copy moves by a third from run to run)")
	flag.Parse()

	tmp, err := os.MkdirTemp("", "forkline-exportbench-")
	check(err)
	defer os.RemoveAll(tmp)
	bin := *given
	if bin == "" {
		bin = filepath.Join(tmp, "forkline")
		build(exec.Command("go", "build", "-o", bin, "./cmd/forkline"))
	}
	duck := filepath.Join(tmp, "duckcopy")
	b := exec.Command("go", "build", "-o", duck, ".")
	b.Dir = "benchmarks/export/duckdb"
	build(b)

	fmt.Printf("forkline export benchmark — %s, %d cores, %s, %s\n", kernel(), runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("load average before: %s\n", loadavg())
	var all []run
	var over []string
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		check(err)
		fmt.Printf("\n%d episodes\n", n)
		fmt.Printf("  %-31s %10s %9s %12s %8s %13s %14s %13s\n", "what", "rows", "wall s", "rows/s", "CPU s", "peak RSS MB", "time / DuckDB", "CPU / DuckDB")
		baselines := map[bool]run{}
		for _, to := range strings.Split(*targets, ",") {
			withTokens := to == "verl-agent" || to == "sft-tokens"
			if withTokens && *collectIt {
				fmt.Printf("  %-31s not measured: collected scripted episodes have no token records\n", "forkline export -to "+to)
				continue
			}
			ds := dataset(bin, *data, n, *collectIt, withTokens)
			d, ok := baselines[withTokens]
			if !ok {
				d = median(*repeat, func() run { return duckdb(duck, ds, filepath.Join(tmp, "duck")) })
				d.Episodes = n
				if withTokens {
					d.What += " (tokens)"
				}
				fmt.Printf("  %-31s %10d %9.2f %12.0f %8.2f %13.1f %14s %13s   %s\n", d.What, d.Rows, d.WallSec, d.RowsPerS, d.CPUSec, d.PeakRSSMB, "1.00", "1.00", ds)
				all = append(all, d)
				baselines[withTokens] = d
			}
			r := median(*repeat, func() run { return export(bin, ds, to, filepath.Join(tmp, "out-"+to), n) })
			r.OfDuckDB = r.WallSec / d.WallSec
			r.CPUOfDuckDB = r.CPUSec / d.CPUSec
			fmt.Printf("  %-31s %10d %9.2f %12.0f %8.2f %13.1f %14.2f %13.2f\n", r.What, r.Rows, r.WallSec, r.RowsPerS, r.CPUSec, r.PeakRSSMB, r.OfDuckDB, r.CPUOfDuckDB)
			all = append(all, r)
			if *maxRatio > 0 && r.CPUOfDuckDB > *maxRatio {
				over = append(over, fmt.Sprintf("%s at %d episodes: CPU %.2fx DuckDB's", to, n, r.CPUOfDuckDB))
			}
		}
	}
	fmt.Printf("\nload average after: %s\n", loadavg())
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(all, "", "  ")
		check(os.WriteFile(*jsonOut, append(data, '\n'), 0o644))
	}
	if len(over) > 0 {
		fatal("over the bound of %.2fx DuckDB's CPU: %s", *maxRatio, strings.Join(over, "; "))
	}
	if *maxRatio > 0 {
		fmt.Printf("every export within %.2fx DuckDB's CPU\n", *maxRatio)
	}
}

// median runs measure n times (at least once) and returns the run of
// median CPU seconds, the lower middle one of an even count.
func median(n int, measure func() run) run {
	runs := make([]run, 0, max(n, 1))
	for range max(n, 1) {
		runs = append(runs, measure())
	}
	slices.SortFunc(runs, func(a, b run) int { return cmp.Compare(a.CPUSec, b.CPUSec) })
	return runs[(len(runs)-1)/2]
}

// dataset returns a dataset of n episodes in dir, generating (or
// collecting) it when it is not there yet.
func dataset(bin, dir string, n int, collectIt, withTokens bool) string {
	name := fmt.Sprintf("generated-%d", n)
	switch {
	case collectIt:
		name = fmt.Sprintf("episodes-%d", n)
	case withTokens:
		name = fmt.Sprintf("generated-tokens-%d", n)
	}
	out := filepath.Join(dir, name)
	if data, err := os.ReadFile(filepath.Join(out, "manifest.json")); err == nil && strings.Contains(string(data), `"status": "complete"`) {
		return out
	}
	check(os.MkdirAll(dir, 0o755))
	if !collectIt {
		os.RemoveAll(out)
		began := time.Now()
		res, err := datagen.Generate(context.Background(), datagen.Config{Dir: out, Episodes: n, Tokens: withTokens})
		if err != nil {
			fatal("generating %d episodes: %v", n, err)
		}
		fmt.Printf("(generated %d episodes, %d steps, in %s: %s)\n", res.Episodes, res.Steps, time.Since(began).Round(time.Second), out)
		return out
	}
	spec := filepath.Join(dir, "export-bench.yaml")
	check(os.WriteFile(spec, []byte(datagen.OneTask), 0o644))
	os.RemoveAll(out)
	began := time.Now()
	cmd := exec.Command(bin, "collect", "-tasks", spec, "-repeats", strconv.Itoa(n), "-replicas", "8", "-out", out, "-quiet", "-json")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fatal("collecting %d episodes: %v", n, err)
	}
	fmt.Printf("(collected %d episodes in %s)\n", n, time.Since(began).Round(time.Second))
	return out
}

func export(bin, ds, to, out string, episodes int) run {
	os.RemoveAll(out)
	dest := out
	if to == "jsonl" {
		check(os.MkdirAll(out, 0o755))
		dest = filepath.Join(out, "episodes.jsonl")
	}
	cmd := exec.Command(bin, "export", "-in", ds, "-to", to, "-out", dest, "-quiet", "-json")
	wall, cpu, rss, stdout := measure(cmd)
	var rep struct {
		Written map[string]int64 `json:"written"`
	}
	check(json.Unmarshal(stdout, &rep))
	var rows int64
	for _, n := range rep.Written {
		rows += n
	}
	if rows != int64(episodes) {
		fatal("export -to %s wrote %d rows of %d episodes", to, rows, episodes)
	}
	return run{What: "forkline export -to " + to, Episodes: episodes, Rows: rows, WallSec: wall, CPUSec: cpu, RowsPerS: float64(rows) / wall, PeakRSSMB: rss}
}

func duckdb(bin, ds, out string) run {
	os.RemoveAll(out)
	wall, cpu, rss, stdout := measure(exec.Command(bin, "-in", ds, "-out", out))
	var rep struct {
		Rows map[string]int64 `json:"rows"`
	}
	check(json.Unmarshal(stdout, &rep))
	// Its rows are the episodes table's, the unit every export writes
	// (one row per episode); it copies the steps table as well, which is
	// the work an export does too (an episode's messages are its steps).
	return run{What: "duckdb COPY episodes+steps", Rows: rep.Rows["episodes"], StepRows: rep.Rows["steps"], WallSec: wall,
		CPUSec: cpu, RowsPerS: float64(rep.Rows["episodes"]) / wall, PeakRSSMB: rss}
}

// measure runs cmd and returns its wall time, its peak RSS in MB (its own
// rusage), its CPU seconds and its stdout.
func measure(cmd *exec.Cmd) (wall, cpu, rssMB float64, stdout []byte) {
	cmd.Stderr = os.Stderr
	began := time.Now()
	out, err := cmd.Output()
	wall = time.Since(began).Seconds()
	if err != nil {
		fatal("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rssMB = float64(ru.Maxrss) / 1024
		cpu = tv(ru.Utime) + tv(ru.Stime)
	}
	return wall, cpu, rssMB, out
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func build(cmd *exec.Cmd) {
	if out, err := cmd.CombinedOutput(); err != nil {
		fatal("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
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
	fmt.Fprintf(os.Stderr, "export bench: "+format+"\n", args...)
	os.Exit(1)
}
