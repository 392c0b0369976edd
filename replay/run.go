package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/policy/agent"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// Run replays the selected episodes of cfg.In. The error is for a replay
// that could not run at all; per-episode failures are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	ds, specs, err := openRecorded(cfg)
	if err != nil {
		return nil, err
	}
	rp, err := newReplayer(ctx, cfg, ds, specs)
	if err != nil {
		return nil, err
	}
	defer rp.close(context.WithoutCancel(ctx))
	return rp.replayAll(ctx, trajectories{ds})
}

// trajectories yields a dataset's trajectories rather than its rows: a
// branch episode with its prefix (its ancestors' steps, then its own, from
// step 0), so replay re-executes the prefix in a fork of the golden and
// then the branch's own steps; an episode that branched is left out, as its
// branches carry it (shard.Dataset.EachTrajectory).
type trajectories struct{ ds *shard.Dataset }

func (t trajectories) EachEpisode(fn func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error) error {
	return t.ds.EachTrajectory(fn)
}

// openRecorded opens the dataset and its task specs: the recorded ones, or
// those of cfg.TaskFiles with the same ids, and checks the task filter.
func openRecorded(cfg Config) (*shard.Dataset, map[string]task.Spec, error) {
	ds, err := shard.Open(cfg.In)
	if err != nil {
		return nil, nil, err
	}
	specs, err := task.DecodeRecords(ds.Manifest().Tasks)
	if err != nil {
		return nil, nil, err
	}
	if cfg.TaskFiles != "" {
		loaded, err := task.Load(cfg.TaskFiles)
		if err != nil {
			return nil, nil, err
		}
		replaced := 0
		for _, s := range loaded {
			if _, ok := specs[s.ID]; ok {
				specs[s.ID] = s.WithDefaults()
				replaced++
			}
		}
		if replaced == 0 {
			return nil, nil, fmt.Errorf("replay: %s holds none of the dataset's tasks (%s)", cfg.TaskFiles, strings.Join(sortedKeys(specs), ", "))
		}
	}
	for _, id := range cfg.Tasks {
		if _, ok := specs[id]; !ok {
			return nil, nil, fmt.Errorf("replay: task %q is not in %s (it has: %s)", id, cfg.In, strings.Join(sortedKeys(specs), ", "))
		}
	}
	return ds, specs, nil
}

// replayer replays the episodes of one dataset on one provider.
type replayer struct {
	cfg       Config
	specs     map[string]task.Spec
	blob      func(sha256 string) ([]byte, error) // resolves recorded screenshots stored by hash
	env       *episode.Env                        // the provider and pool, opened once (episode.OpenEnv)
	prov      providers.Provider
	pool      *pool.Pool
	templates map[string]*pool.Template
	runner    episode.Runner
	// compare is the recording's capture policy with pixels none: both
	// sides of a comparison keep the same view of every observation (a
	// capped recording against the same cap); screenshots are compared by
	// their hash, which is always kept.
	compare capture.Policy
	// agents replays agent episodes (their harness run again against the
	// record); nil when the run's policy was not agent.
	agents   *agent.ReplaySource
	rec      *recording // nil unless Config.Record
	obs      observe.Observer
	log      *slog.Logger
	replayed string       // the run id of the dataset replayed
	ended    atomic.Int64 // episodes replayed so far, for the queue depth
}

// newReplayer opens the provider (by default the one the dataset was
// collected with), wires in the browser for browser tasks as they were
// collected, opens the pool and, with Config.Record, the new dataset.
func newReplayer(ctx context.Context, cfg Config, ds *shard.Dataset, specs map[string]task.Spec) (*replayer, error) {
	m := ds.Manifest()
	recorded, err := capture.DecodeManifest(m.Capture)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	if cfg.Provider == "" {
		cfg.Provider = "local"
		if len(m.Provider) > 0 {
			rec, err := manifest.DecodeProvider(m.Provider)
			if err != nil {
				return nil, fmt.Errorf("replay: %s: %w", cfg.In, err)
			}
			cfg.Provider = cmp.Or(rec.Name, cfg.Provider)
		}
	}
	rp := &replayer{cfg: cfg, specs: specs, blob: ds.Blob, templates: map[string]*pool.Template{}, compare: recorded, replayed: m.RunID}
	rp.compare.Pixels = capture.PixelsNone
	list := make([]task.Spec, 0, len(specs))
	for _, id := range sortedKeys(specs) {
		s := specs[id]
		list = append(list, s)
		if cfg.Image != "" {
			s.Image = cfg.Image
		}
		if rp.templates[id], err = episode.Template(&s); err != nil {
			return nil, fmt.Errorf("replay: task %s: %w", id, err)
		}
	}
	if pr, err := manifest.DecodePolicy(m.Policy); err == nil && pr.Name == agent.Name {
		// Agent episodes replay by running their harness again against
		// the record (policy/agent's replay).
		if rp.agents, err = agent.OpenReplay(pr.Options); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
	}
	rp.obs = observe.Or(cfg.Observer)
	rp.log = replayLogger(cfg, m.RunID)
	logf := func(format string, args ...any) { rp.log.Warn(fmt.Sprintf(format, args...)) }
	// The environment is opened as the collector opens it (the sweep of
	// crashed runs' leftovers, the browser for browser tasks as they were
	// collected, an agent harness's shaping, the pool).
	var shaper any
	if rp.agents != nil {
		shaper = rp.agents
	}
	rp.env, err = episode.OpenEnv(ctx, episode.EnvConfig{
		Provider: cfg.Provider, Options: providers.Options{RunID: "replay-" + m.RunID, Dir: cfg.WorkDir, Params: cfg.ProviderParams},
		Specs: list, Templates: rp.templates, Shaper: shaper,
		Pool: pool.Config{Replicas: cfg.Replicas, Log: logf, OnGolden: rp.onGolden},
		Logf: logf,
	})
	if err != nil {
		if rp.agents != nil {
			rp.agents.Close()
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("replay: %w", ctx.Err())
		}
		return nil, err
	}
	rp.prov, rp.pool = rp.env.Provider, rp.env.Pool
	// The replayed steps are captured under the recording's own policy:
	// the one a Config.Record dataset's manifest states. Without Record the
	// captured rows are dropped with the episode: one runner for both costs
	// a row per step in memory, which the stored steps already take.
	rp.runner = episode.Runner{Provider: rp.prov.Name(), Capture: recorded, Observer: rp.obs}
	if cfg.Record != "" {
		if rp.rec, err = newRecording(cfg, m, list, rp.env.Record); err != nil {
			rp.close(context.WithoutCancel(ctx))
			return nil, err
		}
		rp.runner.RunID = rp.rec.runID
		rp.log = rp.log.With("run_id", rp.rec.runID)
	}
	return rp, nil
}

// close closes the pool and then the provider.
func (rp *replayer) close(ctx context.Context) {
	if err := rp.env.Close(ctx); err != nil {
		rp.log.Warn(fmt.Sprintf("replay: %v", err))
	}
	if rp.agents != nil {
		rp.agents.Close()
	}
}

// episodeSource yields stored episodes with their steps and rewards, in
// order, until fn fails (shard.Dataset.EachEpisode); fn's error is
// returned.
type episodeSource interface {
	EachEpisode(fn func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error) error
}

// replayAll replays the selected episodes of src over the pool — a feeder
// goroutine reads src while the pool runs them — and reports them sorted by
// task and episode. With Config.Record it closes the recording.
func (rp *replayer) replayAll(ctx context.Context, src episodeSource) (*Report, error) {
	rep := &Report{Dataset: rp.cfg.In, Provider: rp.prov.Name(), Mode: rp.cfg.Mode}
	if rp.cfg.Mode == Normalized {
		for _, mk := range rp.cfg.Masks {
			rep.Masks = append(rep.Masks, mk.Name+": "+mk.Pattern.String())
		}
	}
	todo, tasks, err := rp.countSelected(src)
	if err != nil {
		return nil, err
	}
	// The goldens of the replayed tasks are built ahead, in the order
	// their episodes come, so no replica waits at a task boundary.
	var ahead []*pool.Template
	for _, id := range tasks {
		if t := rp.templates[id]; t != nil {
			ahead = append(ahead, t)
		}
	}
	rp.pool.Prepare(ctx, ctx, ahead, rp.cfg.Replicas)
	runID := "replay-" + rp.replayed
	if rp.rec != nil {
		runID = rp.rec.runID
	}
	rp.obs.Observe(observe.RunStarted{Command: "replay", RunID: runID, Planned: todo, Todo: todo, Replicas: rp.cfg.Replicas,
		Live: func() observe.Live {
			o := rp.pool.Occupancy()
			return observe.Live{Replicas: o.Replicas, Busy: o.Busy, Standby: o.Standby, Queued: max(todo-int(rp.ended.Load())-o.Busy, 0)}
		}})
	rp.log.Info("replay started", "episodes", todo, "provider", rp.prov.Name(), "compare", string(rp.cfg.Mode), "in", rp.cfg.In)
	jobs := make(chan pool.Job)
	fed := make(chan error, 1)
	go func() {
		defer close(jobs)
		fed <- rp.feed(ctx, src, jobs)
	}()
	var mu sync.Mutex
	rp.pool.Run(ctx, jobs, func(ctx context.Context, job pool.Job, r pool.Replica, acqErr error) pool.Outcome {
		j := job.Payload.(*recorded)
		er, out := rp.episode(ctx, j, r, acqErr)
		rp.ended.Add(1)
		rp.logEnded(er)
		mu.Lock()
		rep.Episodes = append(rep.Episodes, er)
		mu.Unlock()
		return out
	})
	// At cancellation the pool returns without draining jobs, while the
	// feeder may still be reading the dataset: its result is taken only
	// once it has ended, so no goroutine outlives the replay and nothing
	// races on the result.
	feedErr := <-fed
	rep.tally()
	status := "complete"
	if feedErr != nil || ctx.Err() != nil {
		status = "partial"
	}
	rp.obs.Observe(observe.RunEnded{Status: status, Err: cmp.Or(feedErr, ctx.Err())})
	rp.log.Info("replay ended", "identical", rep.Identical, "diverged", rep.Diverged, "errored", rep.Errored)
	if rp.rec != nil {
		if err := rp.rec.close(rep, feedErr == nil && ctx.Err() == nil); err != nil {
			return nil, err
		}
	}
	if feedErr != nil && !errors.Is(feedErr, context.Canceled) {
		return nil, feedErr
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("replay: %w", ctx.Err())
	}
	if len(rep.Episodes) == 0 {
		return nil, ErrNoEpisodes
	}
	return rep, nil
}

// feed sends the selected episodes of src to jobs until src ends or ctx is
// done. It stops reading at cancellation whether or not the episode at hand
// is selected, so a cancelled replay does not wait for the rest of a large
// dataset to be read.
func (rp *replayer) feed(ctx context.Context, src episodeSource, jobs chan<- pool.Job) error {
	return src.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !selected(rp.cfg, ep) {
			return nil
		}
		spec := rp.specs[ep.TaskID]
		j := &recorded{ep: ep, steps: steps, spec: &spec}
		for _, r := range rewards {
			if r.StepIndex == nil && r.Name == "verify" {
				j.reward, j.hasReward = r.Value, true
			}
		}
		select {
		case jobs <- pool.Job{Template: rp.templates[ep.TaskID], Payload: j}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// tally sorts the episodes by task and episode id and counts them by
// status.
func (rep *Report) tally() {
	sort.Slice(rep.Episodes, func(a, b int) bool {
		x, y := rep.Episodes[a], rep.Episodes[b]
		if x.TaskID != y.TaskID {
			return x.TaskID < y.TaskID
		}
		return x.EpisodeID < y.EpisodeID
	})
	rep.Identical, rep.Diverged, rep.Errored = 0, 0, 0
	for _, e := range rep.Episodes {
		switch e.Status {
		case Identical:
			rep.Identical++
		case Diverged:
			rep.Diverged++
		default:
			rep.Errored++
		}
	}
}

// replayLogger is the replay's logger: Config.Logger, every record with the id of the run replayed.
func replayLogger(cfg Config, replayed string) *slog.Logger {
	l := cfg.Logger
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	id := "replay-" + replayed
	if cfg.Record != "" {
		id = "" // the recording's own, added once it exists (onRecording)
	}
	if id != "" {
		l = l.With("run_id", id)
	}
	return l.With("replayed_run_id", replayed)
}

// onGolden tells the observers of a golden build and logs its end.
func (rp *replayer) onGolden(g pool.GoldenProgress) {
	task, _, _ := strings.Cut(g.Template, "@")
	rp.obs.Observe(observe.Golden{Task: task, Phase: observe.GoldenPhase(g.Phase), Command: g.Command, Index: g.Index,
		Commands: g.Commands, Began: g.Began, Took: g.Took, Err: g.Err})
	switch g.Phase {
	case pool.GoldenBuilt:
		rp.log.Info("golden checkpoint built", "task", task, "setup_commands", g.Commands, "took", g.Took.Round(1e6).String())
	case pool.GoldenFailed:
		rp.log.Warn("golden checkpoint failed", "task", task, "err", g.Err)
	}
}

// logEnded logs a replayed episode's verdict (its end event went to the
// observers from the episode: episode.End).
func (rp *replayer) logEnded(er EpisodeReport) {
	if er.Status != Identical {
		rp.log.Warn("episode "+string(er.Status), "task", er.TaskID, "episode_id", er.EpisodeID, "steps_matched", er.Matched, "error", er.Error)
	} else {
		rp.log.Debug("episode identical", "task", er.TaskID, "episode_id", er.EpisodeID)
	}
}

// countSelected counts the episodes the replay will run (the progress's
// total), from the episode rows only, and lists their tasks in the order
// their first episodes come.
func (rp *replayer) countSelected(src episodeSource) (int, []string, error) {
	var ds *shard.Dataset
	switch s := src.(type) {
	case *shard.Dataset:
		ds = s
	case trajectories:
		ds = s.ds // what Run replays: it counted 0 before, "6/0 episodes"
	default:
		return 0, nil, nil
	}
	n := 0
	var tasks []string
	seen := map[string]bool{}
	for ep, err := range ds.Episodes() {
		if err != nil {
			return 0, nil, err
		}
		if selected(rp.cfg, ep) {
			n++
			if !seen[ep.TaskID] {
				seen[ep.TaskID] = true
				tasks = append(tasks, ep.TaskID)
			}
		}
	}
	return n, tasks, nil
}
