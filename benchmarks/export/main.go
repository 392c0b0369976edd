// Command export measures forkline export on large datasets against DuckDB
// copying the same native shards to Parquet, in the same run: it collects
// datasets of -small and -large episodes with a fast scripted policy
// (each once, kept in -data for the next run), exports each to jsonl, hf
// and verl-sft with the forkline binary, and runs the DuckDB baseline
// (benchmarks/export/duckdb, a module of its own: forkline's module never
// depends on cgo DuckDB) on the same shards. It reports rows/s and peak
// RSS (each run a child process; its own rusage), and the ratio of each
// export's time to DuckDB's.
//
//	go run ./benchmarks/export                        # 10,000 and 100,000 episodes
//	go run ./benchmarks/export -small 1000 -large 10000 -data /tmp/exportbench
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// task is a short shell episode: a command, a file written and read, done.
const task = `id: export-bench
instruction: Write the number of lines in notes.txt into count.txt.
files:
  notes.txt: "buy milk\ncall Ada\nfix the bike\n"
solution:
  - {kind: exec, cmd: wc -l < notes.txt}
  - {kind: write_file, path: count.txt, content: "3\n"}
  - {kind: done, answer: "3"}
verify:
  cmd: test "$(cat count.txt)" = 3
  reward: exit
`

type run struct {
	What      string  `json:"what"`
	Episodes  int     `json:"episodes"`
	Rows      int64   `json:"rows"`
	WallSec   float64 `json:"wall_s"`
	RowsPerS  float64 `json:"rows_per_s"`
	PeakRSSMB float64 `json:"peak_rss_mb"`
	OfDuckDB  float64 `json:"time_over_duckdb"`
}

func main() {
	small := flag.Int("small", 10000, "episodes of the small dataset")
	large := flag.Int("large", 100000, "episodes of the large dataset")
	data := flag.String("data", filepath.Join(os.TempDir(), "forkline-export-bench"), "where the datasets are kept between runs")
	targets := flag.String("to", "jsonl,hf,verl-sft", "export targets")
	jsonOut := flag.String("json", "", "also write the results to `FILE`")
	flag.Parse()

	tmp, err := os.MkdirTemp("", "forkline-exportbench-")
	check(err)
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "forkline")
	build(exec.Command("go", "build", "-o", bin, "./cmd/forkline"))
	duck := filepath.Join(tmp, "duckcopy")
	b := exec.Command("go", "build", "-o", duck, ".")
	b.Dir = "benchmarks/export/duckdb"
	build(b)

	fmt.Printf("forkline export benchmark — %s, %d cores, %s, %s\n", kernel(), runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("load average before: %s\n", loadavg())
	var all []run
	for _, n := range []int{*small, *large} {
		ds := dataset(bin, *data, n)
		fmt.Printf("\n%d episodes (%s)\n", n, ds)
		fmt.Printf("  %-28s %10s %9s %12s %13s %14s\n", "what", "rows", "wall s", "rows/s", "peak RSS MB", "time / DuckDB")
		d := duckdb(duck, ds, filepath.Join(tmp, "duck"))
		d.Episodes = n
		fmt.Printf("  %-28s %10d %9.2f %12.0f %13.1f %14s\n", d.What, d.Rows, d.WallSec, d.RowsPerS, d.PeakRSSMB, "1.00")
		all = append(all, d)
		for _, to := range strings.Split(*targets, ",") {
			r := export(bin, ds, to, filepath.Join(tmp, "out-"+to), n)
			r.OfDuckDB = r.WallSec / d.WallSec
			fmt.Printf("  %-28s %10d %9.2f %12.0f %13.1f %14.2f\n", r.What, r.Rows, r.WallSec, r.RowsPerS, r.PeakRSSMB, r.OfDuckDB)
			all = append(all, r)
		}
	}
	fmt.Printf("\nload average after: %s\n", loadavg())
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(all, "", "  ")
		check(os.WriteFile(*jsonOut, append(data, '\n'), 0o644))
	}
}

// dataset returns a dataset of n episodes in dir, collecting it when it
// is not there yet.
func dataset(bin, dir string, n int) string {
	out := filepath.Join(dir, fmt.Sprintf("episodes-%d", n))
	if data, err := os.ReadFile(filepath.Join(out, "manifest.json")); err == nil && strings.Contains(string(data), `"status": "complete"`) {
		return out
	}
	check(os.MkdirAll(dir, 0o755))
	spec := filepath.Join(dir, "export-bench.yaml")
	check(os.WriteFile(spec, []byte(task), 0o644))
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
	wall, rss, stdout := measure(cmd)
	var rep struct {
		Written map[string]int64 `json:"written"`
	}
	var rows int64
	if to != "jsonl" {
		check(json.Unmarshal(stdout, &rep))
		for _, n := range rep.Written {
			rows += n
		}
	} else {
		rows = int64(episodes)
	}
	return run{What: "forkline export -to " + to, Episodes: episodes, Rows: rows, WallSec: wall, RowsPerS: float64(rows) / wall, PeakRSSMB: rss}
}

func duckdb(bin, ds, out string) run {
	os.RemoveAll(out)
	wall, rss, stdout := measure(exec.Command(bin, "-in", ds, "-out", out))
	var rep struct {
		Rows map[string]int64 `json:"rows"`
	}
	check(json.Unmarshal(stdout, &rep))
	return run{What: "duckdb COPY episodes+steps", Rows: rep.Rows["episodes"], WallSec: wall, RowsPerS: float64(rep.Rows["episodes"]) / wall, PeakRSSMB: rss}
}

// measure runs cmd and returns its wall time, its peak RSS in MB (its own
// rusage) and its stdout.
func measure(cmd *exec.Cmd) (wall, rssMB float64, stdout []byte) {
	cmd.Stderr = os.Stderr
	began := time.Now()
	out, err := cmd.Output()
	wall = time.Since(began).Seconds()
	if err != nil {
		fatal("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rssMB = float64(ru.Maxrss) / 1024
	}
	return wall, rssMB, out
}

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
