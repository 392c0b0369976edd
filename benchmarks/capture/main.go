// Command capture measures what the capture policy costs on browser tasks:
//
//  1. bytes per step under -pixels full, hash and none (and none with no
//     accessibility trees), from collecting the example web tasks with forked
//     replicas: what the run keeps per step as the shard writer estimates it
//     (the collector's row_bytes_per_step: every row committed, uncompressed)
//     and what the steps/ and blobs/ Parquet files really take on disk
//     (zstd), per step;
//
//  2. the time a screenshot and an accessibility snapshot each add to a
//     step: one browser session on the sign-up form repeats a GUI action
//     that changes nothing (wait 0 ms) under observe none, screenshot, a11y
//     and screenshot+a11y; the differences to none are the costs.
//
//     go run ./benchmarks/capture                 # from the repository root
//     go run ./benchmarks/capture -repeats 16 -iterations 100 -json out.json
//
// It needs Chromium (apt-get install chromium, or bash .ci/chromium-up.sh).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/episode"
	_ "github.com/forkline/forkline/policy/all" // collect opens the script policy by name
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/browser"
	"github.com/forkline/forkline/providers/local"
	fruntime "github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/task"
)

type bytesResult struct {
	Pixels          string  `json:"pixels"`
	A11y            string  `json:"a11y"`
	Episodes        int     `json:"episodes"`
	Steps           int64   `json:"steps"`
	Screenshots     int64   `json:"screenshots"`
	BlobsStored     int64   `json:"blobs_stored"`
	DedupRatio      float64 `json:"dedup_ratio"`
	EstimatePerStep float64 `json:"bytes_per_step"`
	DiskPerStep     float64 `json:"disk_bytes_per_step"`
	StepsDiskBytes  int64   `json:"steps_disk_bytes"`
	BlobsDiskBytes  int64   `json:"blobs_disk_bytes"`
	CollectWallSecs float64 `json:"wall_s"`
}

type timeResult struct {
	Observe    string  `json:"observe"`
	N          int     `json:"n"`
	P50MS      float64 `json:"p50_ms"`
	P95MS      float64 `json:"p95_ms"`
	AddedP50MS float64 `json:"added_p50_ms"` // over observe none
	PNGBytes   int     `json:"png_bytes,omitempty"`
	TreeBytes  int     `json:"tree_bytes,omitempty"`
}

func main() {
	tasks := flag.String("tasks", "examples/tasks/web", "the web task `DIR`")
	replicas := flag.Int("replicas", 4, "replicas in parallel")
	repeats := flag.Int("repeats", 8, "episodes per task")
	iterations := flag.Int("iterations", 50, "steps per observe mode in the timing part")
	jsonOut := flag.String("json", "", "also write the results to `FILE`")
	flag.Parse()

	tmp, err := os.MkdirTemp("", "forkline-capture-bench-")
	check(err)
	defer os.RemoveAll(tmp)
	specs, err := task.Load(*tasks)
	check(err)

	fmt.Printf("forkline capture benchmark — %d cores, %s, %s\n", runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("tasks: %s (%d), %d replicas × %d repeats, local provider, forks of one golden per task\n\n", *tasks, len(specs), *replicas, *repeats)

	fmt.Printf("%-7s %-5s %7s %12s %7s %7s %16s %14s\n", "pixels", "a11y", "steps", "screenshots", "blobs", "dedup", "kept B/step", "disk B/step")
	var sizes []bytesResult
	for _, mode := range [][2]string{{"full", "full"}, {"hash", "full"}, {"none", "full"}, {"none", "none"}} {
		r := collectOnce(*tasks, filepath.Join(tmp, mode[0]+"-"+mode[1]), *replicas, *repeats, mode[0], mode[1])
		sizes = append(sizes, r)
		dedup := "-"
		if r.BlobsStored > 0 {
			dedup = fmt.Sprintf("%.1fx", r.DedupRatio)
		}
		fmt.Printf("%-7s %-5s %7d %12d %7d %7s %16.0f %14.0f\n", r.Pixels, r.A11y, r.Steps, r.Screenshots, r.BlobsStored, dedup, r.EstimatePerStep, r.DiskPerStep)
	}

	var form *task.Spec
	for i := range specs {
		if specs[i].ID == "web-form" {
			form = &specs[i]
		}
	}
	if form == nil {
		fatal("no web-form task in %s", *tasks)
	}
	fmt.Printf("\nobservation cost: one session on %s's start page, a wait{ms: 0} step repeated %d times per mode\n", form.ID, *iterations)
	fmt.Printf("%-16s %8s %8s %14s %10s %10s\n", "observe", "p50 ms", "p95 ms", "added p50 ms", "PNG B", "tree B")
	times := timeObservations(form, filepath.Join(tmp, "timing"), *iterations)
	for _, r := range times {
		fmt.Printf("%-16s %8.2f %8.2f %14.2f %10d %10d\n", r.Observe, r.P50MS, r.P95MS, r.AddedP50MS, r.PNGBytes, r.TreeBytes)
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"bytes": sizes, "observation_cost": times}, "", "  ")
		check(os.WriteFile(*jsonOut, append(b, '\n'), 0o644))
	}
}

// collectOnce collects the tasks under one capture policy and measures what
// was kept.
func collectOnce(tasks, out string, replicas, repeats int, pixels, a11y string) bytesResult {
	cfg := collect.Config{
		Tasks: tasks, Out: out, Provider: local.Name, Replicas: replicas, Repeats: repeats,
		WorkDir: out + ".work", Capture: capture.Policy{Pixels: capture.Pixels(pixels), A11y: capture.A11y(a11y), Tokens: capture.TokensKeep},
	}
	sum, err := collect.Run(context.Background(), cfg)
	check(err)
	rep := sum.Report()
	if rep.ByExit["done"] != rep.Episodes {
		fatal("pixels %s: not every episode completed: %v", pixels, rep.ByExit)
	}
	r := bytesResult{Pixels: pixels, A11y: a11y, Episodes: rep.Episodes, Steps: rep.Steps, Screenshots: rep.Screenshots,
		BlobsStored: rep.BlobsStored, DedupRatio: rep.DedupRatio, EstimatePerStep: rep.RowBytesPerStep, CollectWallSecs: rep.WallSec}
	r.StepsDiskBytes = dirBytes(filepath.Join(out, "steps"))
	r.BlobsDiskBytes = dirBytes(filepath.Join(out, "blobs"))
	r.DiskPerStep = float64(r.StepsDiskBytes+r.BlobsDiskBytes) / float64(r.Steps)
	return r
}

func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			if st, err := d.Info(); err == nil {
				n += st.Size()
			}
		}
		return nil
	})
	return n
}

// timeObservations times a no-op GUI step under each observe mode, each in
// its own session on the task's start page.
func timeObservations(spec *task.Spec, dir string, n int) []timeResult {
	prov, err := local.New(providers.Options{Dir: dir})
	check(err)
	defer prov.Close(context.Background())
	files := map[string][]byte{}
	for p, c := range spec.Files {
		files[p] = []byte(c)
	}
	var out []timeResult
	var base float64
	// none first: the others are compared with it.
	for _, mode := range []string{"none", "screenshot", "a11y", "screenshot+a11y"} {
		g, err := episode.GUI(spec.WithDefaults().Browser)
		check(err)
		cfg := browser.ConfigFor(browser.DefaultConfig(), *g)
		check(cfg.Validate())
		cfg.Screenshots, cfg.A11y, err = browser.ParseObserve(mode)
		check(err)
		sb, err := prov.Create(context.Background(), providers.Spec{Files: files})
		check(err)
		s, err := browser.NewSession(sb, cfg)
		check(err)
		ctx := context.Background()
		step := fruntime.Action{Kind: fruntime.ActWait, MS: 0}
		for range 3 { // start the browser and warm up
			_, err := s.Act(ctx, step)
			check(err)
		}
		var ms []float64
		r := timeResult{Observe: mode, N: n}
		for range n {
			began := time.Now()
			obs, err := s.Act(ctx, step)
			check(err)
			ms = append(ms, float64(time.Since(began).Microseconds())/1000)
			if obs.Error {
				fatal("observe %s: %s", mode, obs.Output)
			}
			if obs.Screenshot != nil {
				r.PNGBytes = len(obs.Screenshot.PNG)
			}
			r.TreeBytes = len(obs.AXTree)
		}
		check(s.Close(ctx))
		sort.Float64s(ms)
		r.P50MS, r.P95MS = ms[len(ms)/2], ms[(len(ms)*95)/100]
		if mode == "none" {
			base = r.P50MS
		}
		r.AddedP50MS = r.P50MS - base
		out = append(out, r)
	}
	return out
}

func check(err error) {
	if err != nil {
		fatal("%v", err)
	}
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "capture benchmark: "+format+"\n", args...)
	os.Exit(1)
}
