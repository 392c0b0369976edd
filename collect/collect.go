// Package collect is the collector as a library: it plans the episodes of a
// run (tasks × repeats, with deterministic ids), opens the provider and the
// pool, drives every episode with its policy, verifies it, captures its steps
// and commits everything to the native dataset, episode by episode, so that a
// crash loses at most one open shard generation and a resumed run skips what
// is already kept. It decides what is the episode's failure (kept, a scaffold
// loss) and what is the run's (an unavailable service, a broken writer: not
// kept, the run stops partial), and whether a resume matches the run it
// resumes, read-only. cmd/collect is a thin wrapper around Run.
//
// It is where the consumer-side pieces meet (task, policy, pool, capture,
// formats/shard); none of those know about each other through it.
package collect

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	_ "github.com/forkline/forkline/providers/all" // Run opens providers by name
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// Version is the tool version written into manifests.
const Version = "0.1.0"

// Config is everything a run needs. cmd/collect fills it from flags.
type Config struct {
	Tasks          string            // a task file or a directory of them
	Provider       string            // registry name, e.g. "local"
	ProviderParams map[string]string // backend settings
	Replicas       int               // episodes in parallel
	Repeats        int               // episodes per task
	Seed           int64
	Policy         string // registry name, e.g. "script"
	ScriptFile     string // for policy script: actions to replay instead of each task's solution
	// PolicyOptions are policy settings (-policy-opt k=v). They are recorded
	// in the manifest, so they must never hold a secret: policies take keys
	// from environment variables named here, never from values.
	PolicyOptions map[string]string
	Reset         pool.Strategy
	Capture       capture.Policy
	Shards        shard.Config
	Out           string
	// Grace is how long episodes in flight may run on after ctx is
	// cancelled before they are cancelled too (and kept as cancelled).
	Grace time.Duration
	// Standby keeps this many ready replicas per task prepared in the
	// background, so a reset is a hand-off (pool.Config.Standby).
	Standby int
	// MaxCreates caps concurrent sandbox creations (default 2 × Replicas).
	MaxCreates int
	// Part is the share of the plan this machine collects (default: all).
	Part Part
	// MaxLoss stops scheduling once this invocation's scaffold losses pass
	// it (ErrMaxLoss); the zero value is no limit.
	MaxLoss LossLimit
	Resume  bool // finish the run in Out, skipping kept episodes
	Force   bool // replace the run in Out
	WorkDir string

	// Progress, when set, receives a live progress line (TTY) or periodic
	// progress lines, and the summary is not printed by Run.
	Progress    io.Writer
	ProgressTTY bool
	// Log receives warnings (fallbacks, replaced replicas).
	Log io.Writer
}

// ErrOutputExists is returned when Out holds another run and neither Resume
// nor Force is set.
var ErrOutputExists = errors.New("collect: output directory holds another run (use --resume to finish it or --force to replace it)")

// ErrConfig is wrapped by every error that comes from bad input — flags,
// task files, names of providers or policies, the output directory — as
// opposed to a failure during the run. cmd/collect maps it to exit code 2.
var ErrConfig = errors.New("collect: bad input")

type configError struct{ err error }

func (e configError) Error() string   { return e.err.Error() }
func (e configError) Unwrap() []error { return []error{e.err, ErrConfig} }
func badInput(err error) error {
	if err == nil {
		return nil
	}
	return configError{err}
}

// ErrIncompatibleResume is returned when a resume would produce other
// episodes than the run it resumes: other tasks or plan, provider, policy or
// capture policy (see compatible). The run is left untouched.
var ErrIncompatibleResume = errors.New("collect: cannot resume")

// EpisodeID derives an episode's id from what defines it, so that a rerun or
// a resume produces the same ids and never duplicates an episode.
func EpisodeID(taskID, taskHash string, repeat int, seed int64) string {
	h := sha256.New()
	h.Write([]byte(taskID))
	h.Write([]byte{0})
	h.Write([]byte(taskHash))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(repeat))
	binary.BigEndian.PutUint64(b[8:], uint64(seed))
	h.Write(b[:])
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// planned is one episode of the plan.
type planned struct {
	id     string
	task   *task.Spec
	hash   string
	repeat int
}

type planRecord struct {
	Repeats  int    `json:"repeats"`
	Seed     int64  `json:"seed"`
	Replicas int    `json:"replicas"`
	Reset    string `json:"reset"`
	Episodes int    `json:"episodes"` // planned in this part
	Part     Part   `json:"part"`
	Total    int    `json:"episodes_all_parts"`
}

// Run collects a dataset. It returns the summary and an error; on
// cancellation it finishes the episodes in flight as cancelled, closes the
// shards, marks the manifest partial and returns an error wrapping
// context.Canceled. It stops scheduling early, keeping what ran and marking
// the run partial, when a service the episodes depend on is unavailable
// (ErrUnavailable), when the dataset cannot be written, and when Config.MaxLoss
// is passed (ErrMaxLoss). A complete run whose every episode is a scaffold
// loss returns ErrAllLost. A resume is checked against the run without
// changing it (ErrIncompatibleResume), and resuming a complete run changes
// nothing (Summary.NothingToDo).
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if err := validate(&cfg); err != nil {
		return nil, badInput(err)
	}
	specs, err := task.Load(cfg.Tasks)
	if err != nil {
		return nil, badInput(err)
	}
	for i := range specs {
		specs[i] = specs[i].WithDefaults()
	}
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "collect: "+format+"\n", args...)
		}
	}
	policies, policyRec, err := openPolicy(cfg, specs, logf)
	if err != nil {
		return nil, badInput(err)
	}

	// Plan.
	var plan []planned
	total := 0
	for i := range specs {
		s := &specs[i]
		h := s.Hash()
		for r := range cfg.Repeats {
			total++
			id := EpisodeID(s.ID, h, r, cfg.Seed)
			if cfg.Part.Has(id) {
				plan = append(plan, planned{id: id, task: s, hash: h, repeat: r})
			}
		}
	}

	// A resume is decided on a read-only look at the run, before the
	// provider is opened or the dataset touched: refused, it changes
	// nothing; already complete, there is nothing to do.
	runID := newRunID()
	var prior *priorRun
	if cfg.Resume {
		if prior, err = inspectResume(ctx, cfg, specs, policyRec); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil, err
			}
			return nil, badInput(err)
		}
		runID = prior.manifest.RunID
		if prior.nothingToDo(plan) {
			sum := prior.tally
			sum.Planned, sum.Skipped = len(plan), sum.Episodes
			sum.Status, sum.NothingToDo = string(shard.StatusComplete), true
			return sum, nil
		}
		prior.kept = nil // the writer holds the same set from here on
	}

	// The provider and pool are opened before the output, so a bad provider
	// name or setting leaves no half-made run behind.
	prov, err := providers.Open(ctx, cfg.Provider, providers.Options{RunID: runID, Dir: cfg.WorkDir, Params: cfg.ProviderParams})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, badInput(err)
	}
	// Remove what crashed runs left behind before making more. A sweep that
	// fails is logged, not fatal: leftovers of dead runs do not change this
	// run's episodes. A cancelled one stops the run.
	if sw, ok := providers.As[providers.Sweeper](prov); ok {
		if err := sw.Sweep(ctx); err != nil {
			if ctx.Err() != nil {
				prov.Close(context.WithoutCancel(ctx))
				return nil, fmt.Errorf("collect: %w", ctx.Err())
			}
			logf("sweeping leftovers of crashed runs: %v", err)
		}
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := prov.Close(closeCtx); err != nil {
			logf("closing provider: %v", err)
		}
	}()
	// Tasks with a browser section get their browser through the provider.
	if prov, err = WithBrowsers(prov, specs); err != nil {
		return nil, badInput(err)
	}
	pl, err := pool.New(pool.Config{Provider: prov, Replicas: cfg.Replicas, Strategy: cfg.Reset, Log: logf,
		Standby: cfg.Standby, MaxCreates: cfg.MaxCreates})
	if err != nil {
		return nil, badInput(err)
	}
	defer pl.Close(context.Background())
	providerRec, _ := json.Marshal(map[string]any{"name": prov.Name(), "capabilities": prov.Capabilities(), "params": cfg.ProviderParams, "reset": pl.Strategy()})

	policyJSON, err := json.Marshal(policyRec)
	if err != nil {
		return nil, err
	}
	w, err := openOutput(cfg, runID, specs, len(plan), total, providerRec, policyJSON)
	if err != nil {
		return nil, badInput(err)
	}
	if cfg.Resume {
		if err := redoCancelled(ctx, w, logf); err != nil {
			w.Close(shard.StatusPartial)
			return nil, err
		}
	}
	committed := w.Committed()

	templates := map[string]*pool.Template{}
	for i := range specs {
		s := &specs[i]
		templates[s.ID] = Template(s)
	}

	sum := newSummary(len(plan), 0)
	if prior != nil {
		// The summary covers the whole dataset: the episodes kept before,
		// as tallied from their rows, and what this invocation adds.
		sum = prior.tally
		sum.Planned, sum.Skipped = len(plan), sum.Episodes
	}
	rec := &recorder{w: w, seen: capture.SetIndex{}, capture: cfg.Capture, sum: sum}
	if cfg.Capture.Pixels == "hash" {
		if err := rec.loadBlobs(cfg.Out); err != nil {
			w.Close(shard.StatusPartial)
			return nil, err
		}
	}

	// sched is cancelled when scheduling stops: by a signal (ctx), or from
	// inside (the halter). runCtx is the episodes' context: a signal gives
	// them cfg.Grace to finish on their own before they are cancelled too.
	sched, stopScheduling := context.WithCancelCause(ctx)
	defer stopScheduling(nil)
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	halt := &halter{sched: sched, stop: stopScheduling, cancelRun: cancelRun, log: logf}
	todo := 0
	for i := range plan {
		if !committed[plan[i].id] {
			todo++
		}
	}

	jobs := make(chan pool.Job)
	go func() {
		defer close(jobs)
		for i := range plan {
			if committed[plan[i].id] {
				continue
			}
			if sched.Err() != nil {
				return
			}
			select {
			case jobs <- pool.Job{Template: templates[plan[i].task.ID], Payload: &plan[i]}:
			case <-sched.Done():
				return
			}
		}
	}()

	stopProgress := startProgress(cfg, sum)
	began := time.Now()
	runner := episodeRunner{cfg: cfg, runID: runID, provider: prov.Name(), rec: rec, policies: policies, log: logf,
		halt: halt, todo: todo}
	stopGrace := context.AfterFunc(ctx, func() {
		if cfg.Grace <= 0 {
			cancelRun()
			return
		}
		logf("stopping: no new episodes; episodes in flight get %s to finish", cfg.Grace)
		time.AfterFunc(cfg.Grace, cancelRun)
	})
	defer stopGrace()
	if cfg.Standby > 0 {
		byTask := map[string]int{}
		for _, p := range plan {
			if !committed[p.id] {
				byTask[p.task.ID]++
			}
		}
		for id, n := range byTask {
			pl.Expect(runCtx, templates[id], n)
		}
	}
	pl.Run(runCtx, jobs, runner.run)
	sum.finish(time.Since(began), pl.Stats())
	stopProgress()
	logErrorCounts(sum, logf)

	// The run is complete when every planned episode is kept, whatever
	// its outcome — even if a stop came during the grace period.
	status := shard.StatusComplete
	var runErr error
	kept := len(committed) + sum.Done()
	unavailable, writeErr, maxLoss := halt.state()
	switch rep := sum.Report(); {
	case rec.failed() != nil || writeErr != nil:
		// The writer broke: no new episode was started after it.
		status, runErr = shard.StatusPartial, cmp.Or(rec.failed(), writeErr)
	case unavailable != nil:
		status = shard.StatusPartial
		runErr = fmt.Errorf("%w: %d episodes were not kept and %d of %d planned episodes are kept; run again with -resume once it is back: %w",
			ErrUnavailable, rep.NotRun, kept, len(plan), unavailable)
	case kept < len(plan) && ctx.Err() != nil:
		status, runErr = shard.StatusPartial, fmt.Errorf("collect: %w (%d of %d planned episodes kept)", context.Canceled, kept, len(plan))
	case kept < len(plan) && maxLoss:
		status = shard.StatusPartial
		runErr = fmt.Errorf("%w %s: %d scaffold losses in this invocation; %d of %d planned episodes kept (-resume continues)",
			ErrMaxLoss, cfg.MaxLoss, sum.RanLosses(), kept, len(plan))
	case kept < len(plan):
		status = shard.StatusPartial
		runErr = fmt.Errorf("collect: %d of %d planned episodes are missing", len(plan)-kept, len(plan))
	case rep.Episodes > 0 && rep.Losses == rep.Episodes:
		// Complete — every planned episode is kept — but nothing worked.
		runErr = fmt.Errorf("%w: all %d episodes of the run (%s)", ErrAllLost, rep.Episodes, mostCommonError(rep))
	}
	sum.Status = string(status)
	sumJSON, _ := json.Marshal(sum.Report())
	w.Update(func(m *shard.Manifest) { m.Summary = sumJSON })
	if err := w.Close(status); err != nil {
		sum.Status = string(shard.StatusPartial)
		return sum, errors.Join(runErr, err)
	}
	return sum, runErr
}

// logErrorCounts logs, once each, the distinct errors this invocation met,
// with how many episodes of the dataset ended with them.
func logErrorCounts(sum *Summary, logf func(string, ...any)) {
	sum.mu.Lock()
	defer sum.mu.Unlock()
	for _, t := range []*errorTally{&sum.errs, &sum.unavailable} {
		for i, e := range t.counts {
			if t.seen[i] && e.Episodes > 1 {
				what := ""
				if t == &sum.unavailable {
					what = "not kept, a service was unavailable: "
				}
				logf("%s%s", what, e)
			}
		}
	}
}

func mostCommonError(r Report) string {
	if len(r.Errors) == 0 {
		return "no error detail"
	}
	return "most common: " + r.Errors[0].String()
}

func validate(cfg *Config) error {
	if cfg.Tasks == "" {
		return errors.New("collect: no tasks given (-tasks DIR|FILE)")
	}
	if cfg.Out == "" {
		return errors.New("collect: no output directory given (-out DIR)")
	}
	if cfg.Provider == "" {
		cfg.Provider = "local"
	}
	if cfg.Policy == "" {
		cfg.Policy = "script"
	}
	// Zero counts take their defaults (a library caller's zero Config);
	// negative ones are refused, never silently replaced. cmd/collect also
	// refuses an explicit zero where it means nothing.
	for _, c := range []struct {
		field, flag string
		v           int64
	}{
		{"Replicas", "-replicas", int64(cfg.Replicas)},
		{"Repeats", "-repeats", int64(cfg.Repeats)},
		{"Standby", "-standby", int64(cfg.Standby)},
		{"MaxCreates", "-max-creates", int64(cfg.MaxCreates)},
		{"Grace", "-grace", int64(cfg.Grace)},
	} {
		if c.v < 0 {
			return fmt.Errorf("collect: %s (%s) is negative: %d", c.field, c.flag, c.v)
		}
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Repeats == 0 {
		cfg.Repeats = 1
	}
	if cfg.Reset == "" {
		cfg.Reset = pool.Auto
	}
	if cfg.Part.Count == 0 {
		cfg.Part = Whole
	}
	if cfg.Part.Index < 0 || cfg.Part.Index >= cfg.Part.Count {
		return fmt.Errorf("collect: shard %s is out of range", cfg.Part)
	}
	if cfg.Capture == (capture.Policy{}) {
		cfg.Capture = capture.DefaultPolicy()
	}
	if err := cfg.Capture.Validate(); err != nil {
		return err
	}
	if cfg.Shards == (shard.Config{}) {
		cfg.Shards = shard.DefaultConfig()
	}
	if cfg.Resume && cfg.Force {
		return errors.New("collect: --resume and --force contradict each other")
	}
	return cfg.Shards.Validate()
}

func newRunID() string {
	var b [6]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// openOutput creates, resumes or replaces the dataset in cfg.Out.
// A resume was checked read-only (inspectResume) before it gets here.
func openOutput(cfg Config, runID string, specs []task.Spec, episodes, total int, providerRec, policyRec json.RawMessage) (*shard.Writer, error) {
	planRec, _ := json.Marshal(planRecord{Repeats: cfg.Repeats, Seed: cfg.Seed, Replicas: cfg.Replicas, Reset: string(cfg.Reset),
		Episodes: episodes, Part: cfg.Part, Total: total})
	tasksRec, err := task.EncodeRecords(specs)
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(filepath.Join(cfg.Out, "manifest.json"))
	exists := statErr == nil
	switch {
	case exists && cfg.Resume:
		w, err := shard.Resume(cfg.Out, cfg.Shards)
		if err != nil {
			return nil, err
		}
		w.Update(func(m *shard.Manifest) {
			m.Plan = planRec
			// The run keeps its own provider and policy entries: the resume
			// check let through only differences that do not change an
			// episode. A manifest written before the entries were recorded
			// at creation may lack them.
			if m.Provider == nil {
				m.Provider = providerRec
			}
			if m.Policy == nil {
				m.Policy = policyRec
			}
		})
		return w, nil
	case exists && cfg.Force:
		if err := shard.RemoveDataset(cfg.Out); err != nil {
			return nil, fmt.Errorf("collect: -force refuses to clear %s: %w", cfg.Out, err)
		}
	case exists:
		return nil, fmt.Errorf("%w: %s", ErrOutputExists, cfg.Out)
	case cfg.Resume:
		return nil, fmt.Errorf("collect: --resume: %s holds no run (no manifest.json)", cfg.Out)
	}
	if entries, err := os.ReadDir(cfg.Out); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("collect: output directory %s is not empty and holds no forkline run; choose an empty or new directory (-force replaces only a forkline run)", cfg.Out)
	}
	m := shard.Manifest{
		SchemaVersion: schemas.Version, Tool: "forkline", ToolVersion: Version, RunID: runID,
		Tasks: tasksRec, Plan: planRec, Capture: cfg.Capture.MarshalManifest(),
		// Recorded at creation, so that a run that crashes before its first
		// generation closes can still be checked on resume.
		Provider: providerRec, Policy: policyRec,
	}
	return shard.Create(cfg.Out, m, cfg.Shards)
}

// Template is how a task becomes a pool template.
func Template(s *task.Spec) *pool.Template {
	files := map[string][]byte{}
	for p, c := range s.Files {
		files[p] = []byte(c)
	}
	env := make([]string, 0, len(s.Env))
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return &pool.Template{
		Key: s.ID + "@" + s.Hash()[:12],
		Spec: providers.Spec{
			Image:     s.Image,
			Files:     files,
			Env:       env,
			OutputCap: s.Limits.OutputCap,
			Resources: providers.Resources{CPUs: s.Limits.CPUs, MemoryMB: s.Limits.MemoryMB, Pids: s.Limits.Pids, Capabilities: s.Limits.Capabilities},
			Labels:    map[string]string{taskLabel: s.ID},
		},
		Setup:          s.Setup,
		Start:          s.Start,
		CommandTimeout: 5 * time.Minute,
	}
}

// recorder serialises commits and keeps the run-wide blob index. Blobs are
// deduplicated at commit time, under the lock, so a blob is always written in
// the same generation as — or an earlier one than — the first episode that
// references it.
type recorder struct {
	w       *shard.Writer
	capture capture.Policy
	sum     *Summary

	mu   sync.Mutex
	seen capture.SetIndex
	err  error
}

func (r *recorder) loadBlobs(dir string) error {
	if len(r.w.Manifest().Shards) == 0 {
		return nil
	}
	ds, err := shard.Open(dir)
	if err != nil {
		return err
	}
	for b, err := range ds.Blobs() {
		if err != nil {
			return err
		}
		r.seen.Add(b.SHA256)
	}
	return nil
}

// commit writes the episode and counts it; firstError reports a scaffold
// loss whose error this invocation had not met yet.
func (r *recorder) commit(ctx context.Context, b shard.EpisodeBatch) (firstError bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := b.Blobs[:0]
	for _, bl := range b.Blobs {
		if r.seen.Add(bl.SHA256) {
			kept = append(kept, bl)
		}
	}
	b.Blobs = kept
	if err := r.w.Commit(ctx, b); err != nil {
		if r.err == nil {
			r.err = err
		}
		return false, err
	}
	return r.sum.addEpisode(b), nil
}

func (r *recorder) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// redoCancelled removes, from a run being resumed, the episodes a stop
// kept as cancelled, so that they run again: a resumed run ends with the
// episodes an uninterrupted run would have, each once and finished. Their
// partial rows were worth keeping while the run was stopped (a run that is
// never resumed still has them); once the episode can be run whole, they
// are not. Copy the run directory first to keep them.
func redoCancelled(ctx context.Context, w *shard.Writer, logf func(string, ...any)) error {
	redo := map[string]bool{}
	for id, exit := range w.ExitReasons() {
		if exit == string(runtime.ExitCancelled) {
			redo[id] = true
		}
	}
	if len(redo) == 0 {
		return nil
	}
	n, err := w.Drop(ctx, redo)
	if err != nil {
		return fmt.Errorf("collect: resume: removing the cancelled episodes to run them again: %w", err)
	}
	logf("resume: %d episodes kept as cancelled run again (their partial rows are replaced)", n)
	return nil
}
