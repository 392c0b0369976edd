// Command view measures forkline view's episode list on a large run
// against DuckDB answering the same query over the same Parquet shards, in
// the same sitting: it generates a run of -episodes episodes
// (benchmarks/datagen; -collect collects them with forkline collect
// instead; once, kept in -data for the next time), starts forkline view on it, asks each
// query several times, and runs each query's SQL with the DuckDB oracle
// (internal/oracle/duckdb, a module of its own). It reports each query's
// median wall time, the ratio to DuckDB's, and the view process's peak
// RSS (VmHWM) after all of them, against its RSS before the first.
//
//	go run ./benchmarks/view                           # 100,000 episodes
//	go run ./benchmarks/view -episodes 10000 -data /tmp/viewbench
//	go run ./benchmarks/view -in runs/big                 # a dataset as it is
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forkline/forkline/benchmarks/datagen"
)

type query struct {
	name   string
	params string
	sql    string // over m: episodes joined with their verify reward
}

// queries: the first is asked first, on a view that has built no index
// yet (its time includes building it: cold); every query is then asked
// -repeat times (warm).
var queries = []query{
	{"first page, by id", "limit=50", "SELECT episode_id FROM m ORDER BY episode_id LIMIT 50"},
	{"one task, longest first", "task=grep-errors&sort=duration_ms&desc=true&limit=50", "SELECT episode_id FROM m WHERE task_id = 'grep-errors' ORDER BY duration_ms DESC, episode_id LIMIT 50"},
	{"task!=…, reward 0.5..1", "where=task_id!%3Dexport-bench&min_reward=0.5&max_reward=1&sort=reward&desc=true&limit=50", "SELECT episode_id FROM m WHERE task_id <> 'export-bench' AND reward BETWEEN 0.5 AND 1 ORDER BY reward DESC, episode_id LIMIT 50"},
	{"branches, no drift", "branch=true&drift=false&limit=50", "SELECT episode_id FROM m WHERE parent_episode_id IS NOT NULL AND NOT token_drift ORDER BY episode_id LIMIT 50"},
	{"reward ≥ 1, longest first", "min_reward=1&sort=duration_ms&desc=true&limit=50", "SELECT episode_id FROM m WHERE reward >= 1 ORDER BY duration_ms DESC, episode_id LIMIT 50"},
	{"exit=done, page 200", "exit=done&offset=10000&limit=50", "SELECT episode_id FROM m WHERE exit_reason = 'done' ORDER BY episode_id LIMIT 50 OFFSET 10000"},
	{"text, no match (cold)", "text=no%20such%20text&limit=50", "SELECT episode_id FROM m WHERE episode_id IN (SELECT episode_id FROM read_parquet('STEPS') WHERE contains(lower(action_json), 'no such text') OR contains(lower(output), 'no such text') OR contains(lower(coalesce(model_text, '')), 'no such text')) ORDER BY episode_id LIMIT 50"},
	{"text in steps (cold)", "text=wc%20-l&limit=50", "SELECT episode_id FROM m WHERE episode_id IN (SELECT episode_id FROM read_parquet('STEPS') WHERE contains(lower(action_json), 'wc -l') OR contains(lower(output), 'wc -l') OR contains(lower(coalesce(model_text, '')), 'wc -l')) ORDER BY episode_id LIMIT 50"},
}

func main() {
	episodes := flag.Int("episodes", 100_000, "episodes in the run")
	collectIt := flag.Bool("collect", false, "collect the run with forkline collect (a scripted policy in containers) instead of generating it (benchmarks/datagen)")
	data := flag.String("data", filepath.Join(os.TempDir(), "forkline-viewbench"), "where the run is kept between runs")
	repeat := flag.Int("repeat", 3, "times each query is asked")
	other := flag.String("forkline", "", "measure this forkline binary's view (another tree's build, for a before/after) instead of building this tree's")
	in := flag.String("in", "", "measure this dataset as it is (a partial one too) instead of collecting one")
	flag.Parse()

	tmp, err := os.MkdirTemp("", "viewbench-")
	check(err)
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "forkline")
	build(exec.Command("go", "build", "-o", bin, "./cmd/forkline"))
	viewBin := bin
	if *other != "" {
		viewBin = *other
	}
	duck := filepath.Join(tmp, "duckdb")
	b := exec.Command("go", "build", "-o", duck, ".")
	b.Dir = "internal/oracle/duckdb"
	build(b)

	ds := *in
	if ds == "" {
		ds = dataset(bin, *data, *episodes, *collectIt)
	} else {
		*episodes = count(duck, ds)
	}
	view := exec.Command(viewBin, "view", ds, "-addr", "127.0.0.1:0")
	stderr, err := view.StderrPipe()
	check(err)
	check(view.Start())
	defer view.Process.Kill()
	began := time.Now()
	addr := ""
	lines := bufio.NewScanner(stderr)
	re := regexp.MustCompile(`at (http://[^/]+)/`)
	for lines.Scan() {
		if m := re.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
			break
		}
	}
	if addr == "" {
		fatal("forkline view printed no address")
	}
	go io.Copy(io.Discard, stderr)
	listening := time.Since(began)
	fmt.Printf("forkline view benchmark — %d episodes (%s); view listening in %.2fs; RSS %0.f MB\n",
		*episodes, ds, listening.Seconds(), rss(view.Process.Pid, "VmRSS"))
	// The run's summary: read before listening by a view that prints the
	// address late (no "summarising" answer), in the background by one
	// that listens at once. The queries below start once it is read, so
	// they are timed alike either way.
	for {
		resp, err := http.Get(addr + "/api/runs/0")
		check(err)
		var body struct {
			Summarising bool `json:"summarising"`
		}
		check(json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		if !body.Summarising {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("run summary read %.1fs after start; RSS %0.f MB\n", time.Since(began).Seconds(), rss(view.Process.Pid, "VmRSS"))
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at start: %s", load)
	fmt.Printf("  %-28s %10s %10s %8s %8s\n", "query", "view ms", "duckdb ms", "ratio", "matched")
	with := fmt.Sprintf(`WITH e AS (SELECT * FROM read_parquet('%s')),
r AS (SELECT episode_id, first(value) AS reward FROM read_parquet('%s') WHERE name = 'verify' AND step_index IS NULL AND value IS NOT NULL GROUP BY episode_id),
m AS (SELECT e.*, r.reward FROM e LEFT JOIN r USING (episode_id)) `, filepath.Join(ds, "episodes", "part-*.parquet"), filepath.Join(ds, "rewards", "part-*.parquet"))
	for qi, q := range queries {
		var vt, dt []float64
		var got, want []string
		matched := 0
		if qi == 0 {
			t0 := time.Now()
			got, matched = list(addr + "/api/runs/0/episodes?" + q.params)
			fmt.Printf("  %-28s %10.0f %10s %8s %8d   (builds the index; RSS after: %.0f MB)\n", "first list asked (cold)", ms(time.Since(t0)), "", "", matched, rss(view.Process.Pid, "VmRSS"))
		}
		cold := strings.HasSuffix(q.name, "(cold)")
		for i := range *repeat {
			t0 := time.Now()
			got, matched = list(addr + "/api/runs/0/episodes?" + q.params)
			if cold && i == 0 {
				fmt.Printf("  %-28s %10.0f %10s %8s %8d\n", q.name, ms(time.Since(t0)), "", "", matched)
				q.name = strings.Replace(q.name, "(cold)", "(cached)", 1)
			}
			vt = append(vt, ms(time.Since(t0)))
			t0 = time.Now()
			want = duckdb(duck, with+strings.ReplaceAll(q.sql, "STEPS", filepath.Join(ds, "steps", "part-*.parquet")))
			dt = append(dt, ms(time.Since(t0)))
		}
		if matched < 0 {
			continue
		}
		if !slices.Equal(got, want) {
			fatal("%s: forkline view and DuckDB disagree:\n%v\n%v", q.name, got, want)
		}
		v, d := median(vt), median(dt)
		fmt.Printf("  %-28s %10.0f %10.0f %7.2fx %8d\n", q.name, v, d, v/d, matched)
	}
	// An episode's page: the last episode in the episodes table's order,
	// the worst case of the streams that find it.
	last := duckdb(duck, fmt.Sprintf("SELECT episode_id FROM read_parquet('%s', file_row_number = true, filename = true) ORDER BY filename DESC, file_row_number DESC LIMIT 1",
		filepath.Join(ds, "episodes", "part-*.parquet")))
	var et []float64
	for range *repeat {
		t0 := time.Now()
		resp, err := http.Get(addr + "/api/runs/0/episodes/" + last[0])
		check(err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fatal("episode page %s: %s", last[0], resp.Status)
		}
		et = append(et, ms(time.Since(t0)))
	}
	fmt.Printf("  %-28s %10.0f\n", "episode page (the last one)", median(et))
	fmt.Printf("view peak RSS after the queries: %.0f MB\n", rss(view.Process.Pid, "VmHWM"))
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at the end: %s", load)
}

// count is the number of episodes in the dataset's listed shards (DuckDB
// reads the unlisted temporary files of a run being written no more than
// forkline does: they are hidden, .part-*.tmp).
func count(duck, ds string) int {
	out, err := exec.Command(duck, "-sql", fmt.Sprintf("SELECT count(*) AS n FROM read_parquet('%s')", filepath.Join(ds, "episodes", "part-*.parquet"))).Output()
	check(err)
	var rows []struct {
		N int `json:"n"`
	}
	check(json.Unmarshal(out, &rows))
	return rows[0].N
}

// lenient: a query the view refuses is reported and skipped (an older
// forkline's view, with fewer parameters).
var lenient = flag.Bool("lenient", false, "report and skip a query the view refuses (an older -forkline)")

func list(u string) ([]string, int) {
	resp, err := http.Get(u)
	check(err)
	defer resp.Body.Close()
	var page struct {
		Matched  int `json:"matched"`
		Episodes []struct {
			ID string `json:"episode_id"`
		} `json:"episodes"`
		Error string `json:"error"`
	}
	check(json.NewDecoder(resp.Body).Decode(&page))
	if page.Error != "" {
		if *lenient {
			fmt.Printf("    (%s: %s)\n", u, page.Error)
			return nil, -1
		}
		fatal("%s: %s", u, page.Error)
	}
	var ids []string
	for _, e := range page.Episodes {
		ids = append(ids, e.ID)
	}
	return ids, page.Matched
}

func duckdb(bin, sql string) []string {
	out, err := exec.Command(bin, "-sql", sql).Output()
	if err != nil {
		fatal("duckdb: %v", err)
	}
	var rows []struct {
		ID string `json:"episode_id"`
	}
	check(json.Unmarshal(out, &rows))
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

func dataset(bin, dir string, n int, collectIt bool) string {
	name := fmt.Sprintf("generated-%d", n)
	if collectIt {
		name = fmt.Sprintf("episodes-%d", n)
	}
	out := filepath.Join(dir, name)
	if data, err := os.ReadFile(filepath.Join(out, "manifest.json")); err == nil && strings.Contains(string(data), `"status": "complete"`) {
		return out
	}
	check(os.MkdirAll(dir, 0o755))
	if !collectIt {
		os.RemoveAll(out)
		began := time.Now()
		res, err := datagen.Generate(context.Background(), datagen.Config{Dir: out, Episodes: n})
		if err != nil {
			fatal("generating %d episodes: %v", n, err)
		}
		fmt.Printf("(generated %d episodes, %d steps, in %s: %s)\n", res.Episodes, res.Steps, time.Since(began).Round(time.Second), out)
		return out
	}
	spec := filepath.Join(dir, "view-bench.yaml")
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

// rss reads a memory figure (VmRSS, VmHWM) of a process, in MB.
func rss(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	check(err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

func build(cmd *exec.Cmd) {
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fatal("%s: %v", strings.Join(cmd.Args, " "), err)
	}
}

func check(err error) {
	if err != nil {
		fatal("%v", err)
	}
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "viewbench: "+format+"\n", args...)
	os.Exit(1)
}
