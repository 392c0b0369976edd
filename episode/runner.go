package episode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// Runner makes the episodes of one run: what every episode row of the run
// shares, and the capture policy its steps are kept under. The zero Capture
// is not valid; a Runner is a value, safe to share between goroutines.
type Runner struct {
	RunID    string         // every row's run_id
	Provider string         // the provider's name, every row's provider
	Capture  capture.Policy // what each step keeps
	// Observer is told of every episode's reset (Begin), steps (Rollout,
	// Drive) and end (End): the one place the events of an episode are
	// made, whichever consumer runs it. Nil tells no one.
	Observer observe.Observer
}

// Identity is what defines an episode, whichever run runs it: a collected
// episode, a resumed run's rerun of it and its replay share it.
type Identity struct {
	EpisodeID string
	TaskHash  string
	Repeat    int
	Seed      int64 // the run seed
	// GroupID is the row's group_id: the episodes sharing a prefix (see
	// RootGroupID and BranchGroupID); "" leaves it null.
	GroupID string
	// Branch is set for a branch episode: where it comes from.
	Branch *Lineage
}

// Lineage is where a branch episode comes from: its parent, the step it
// starts at (the number of steps it inherits), its index among the
// parent's branches at that step.
type Lineage struct {
	ParentID string
	Step     int
	Index    int
}

// Episode is one run of a task on a pool replica, from the moment the pool
// handed the replica over (or failed to) until its rows are built. Its
// pieces are called in order — Begin, then NoReplica or PolicyFailed, or
// Rollout and Verify, then Rows — by the one goroutine that runs it.
type Episode struct {
	Task    *task.Spec
	Replica pool.Replica
	// Row is the episode row: identity, replica and reset fields from
	// Begin, outcome and timings as the pieces run.
	Row schemas.EpisodeRow
	// Capture holds the steps as rows, the blobs and the model turns.
	Capture *capture.Sink
	// Result is the rollout's, once Rollout ran.
	Result runtime.Result
	// Reward is the verifier's row, once Verify ran.
	Reward *schemas.RewardRow
	// Metrics are the further reward rows the verifier made (a Harbor
	// reward.json's keys beside "reward"), named by their keys.
	Metrics []schemas.RewardRow
	// Broken is set when the sandbox failed under the episode: the pool
	// replaces the replica (Outcome).
	Broken bool

	obs   observe.Observer
	built *schemas.EpisodeRow // the row Rows built
}

// Begin starts an episode of t on the replica the pool handed over (a zero
// Replica when it could not: see NoReplica). The row holds the episode's
// identity, the run's fields, and the replica: its slot, attempt, how it was
// reset and from which golden.
func (r Runner) Begin(id Identity, t *task.Spec, rep pool.Replica) *Episode {
	row := schemas.EpisodeRow{
		EpisodeID: id.EpisodeID, RunID: r.RunID, TaskID: t.ID, TaskHash: id.TaskHash,
		Repeat: int32(id.Repeat), Seed: id.Seed, Replica: int32(rep.Slot), Attempt: int32(rep.Attempt),
		Provider: r.Provider, ResetStrategy: ResetName(rep), ResetOrigin: rep.Origin,
		ResetMS: schemas.Millis(rep.Reset), StartedAt: time.Now().UnixMilli(),
	}
	if len(t.Metadata) > 0 {
		m := string(t.Metadata)
		row.Metadata = &m
	}
	if rep.Golden != nil {
		row.GoldenID = rep.Golden.Checkpoint.ID
		row.GoldenBuildMS = schemas.Millis(rep.Golden.BuildTime)
		row.GoldenBytes = rep.Golden.Checkpoint.Bytes
	}
	if id.GroupID != "" {
		row.GroupID = &id.GroupID
	}
	if b := id.Branch; b != nil {
		parent, step, index := b.ParentID, int32(b.Step), int32(b.Index)
		row.ParentEpisodeID, row.BranchStep, row.BranchIndex = &parent, &step, &index
	}
	e := &Episode{Task: t, Replica: rep, Row: row, Capture: capture.NewSink(r.Capture, id.EpisodeID, t.ID), obs: r.Observer}
	// A replica was handed over: not the zero one of NoReplica, nor the
	// one a branch the pool could not fork names its strategy with.
	if (rep.Sandbox != nil || rep.Reset > 0) && e.obs != nil {
		ev := observe.Reset{Task: t.ID, Strategy: row.ResetStrategy, Method: rep.Origin, Took: rep.Reset}
		if rep.Golden != nil {
			ev.GoldenBuild = rep.Golden.BuildTime
		}
		e.obs.Observe(ev)
	}
	return e
}

// End tells the run's observer that the episode ended: kept when the
// consumer kept it (Rows said so and the commit went through), status a
// replay's verdict ("" otherwise). Call it once, after Rows when it ran.
func (e *Episode) End(kept bool, status string) {
	row := e.Row
	switch {
	case e.built != nil:
		row = *e.built
	case e.Capture != nil:
		row.Steps = int32(len(e.Capture.Steps()))
	}
	observe.Or(e.obs).Observe(EndedEvent(row, e.Reward, kept, status))
}

// ResetName is the reset_strategy column: fork or recreate, with "+standby"
// when the replica was prepared ahead and only handed off.
func ResetName(r pool.Replica) string {
	if r.Standby {
		return string(r.Strategy) + "+standby"
	}
	return string(r.Strategy)
}

// NoReplica records that the pool could not hand over a replica (err): the
// episode ends as env_error, or as cancelled when the run was stopping. An
// err wrapping runtime.ErrUnavailable is the run's failure rather than the
// episode's; the caller tells them apart before it keeps the rows.
func (e *Episode) NoReplica(ctx context.Context, err error) {
	e.Row.ExitReason = string(runtime.ExitEnvError)
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		e.Row.ExitReason = string(runtime.ExitCancelled)
	}
	e.Row.Detail = err.Error()
}

// Interrupted records that the episode cannot be trusted as a trajectory
// (detail says why) although it ran to an end: it is kept as cancelled,
// without its reward, so that a resume runs it again.
func (e *Episode) Interrupted(detail string) {
	e.Row.ExitReason, e.Row.Detail = string(runtime.ExitCancelled), detail
	e.Reward, e.Metrics = nil, nil
}

// PolicyFailed records that the episode's policy could not be made.
func (e *Episode) PolicyFailed(err error) {
	e.Row.ExitReason, e.Row.Detail = string(runtime.ExitPolicyError), err.Error()
}

// Rollout runs pol on the replica's sandbox, from history h under lim.
// The steps h holds are the episode's prefix (a branch's: its ancestors'
// steps, which its replica's files already reflect): they are not
// captured again, but their model turns open the token record, and the
// episode's own steps are numbered after them. Every step goes to the
// capture sink and then, when watch is not nil, to watch (a replay compares
// there; a server could stream there). The outcome
// — exit reason, detail, answer, timings — goes into Row and Result, and a
// sandbox that failed under the episode marks it Broken.
//
// The error is for an episode whose steps must not be kept as its outcome:
// one wrapping runtime.ErrUnavailable when a service the episode depends on
// went away under it (a resume should run it whole once the service is
// back), or the error of a watch that failed (the episode then ends as
// unknown, Broken).
func (e *Episode) Rollout(ctx context.Context, pol runtime.Policy, h runtime.History, lim runtime.Limits, watch runtime.StepSink) error {
	var sink runtime.StepSink = e.Capture
	if e.obs != nil {
		watch = ChainSinks(StepObserver(e.obs, e.Task.ID, e.Row.EpisodeID), watch)
	}
	if watch != nil {
		sink = runtime.StepSinkFunc(func(ctx context.Context, s runtime.Step) error {
			if err := e.Capture.WriteStep(ctx, s); err != nil {
				return err
			}
			return watch.WriteStep(ctx, s)
		})
	}
	if len(h.Steps) > 0 {
		e.Capture.Prefix(h.Steps)
	}
	began := time.Now()
	if obs, ok := e.Replica.Sandbox.(startObserver); ok && len(h.Steps) == 0 && h.Start == nil {
		// A GUI episode starts from what its start page shows, so the
		// model's first prompt holds the page (issue: the first request
		// held the instruction only).
		start, err := obs.Observe(ctx)
		if err != nil {
			e.Result = runtime.Result{Exit: runtime.ExitEnvError, Detail: "episode: observing the start page: " + err.Error(), Err: err}
			if ctx.Err() != nil {
				e.Result.Exit = runtime.ExitCancelled
			}
			e.Row.ExitReason, e.Row.Detail = string(e.Result.Exit), e.Result.Detail
			e.Row.DurationMS = schemas.Millis(time.Since(began))
			e.Broken = e.Result.Exit == runtime.ExitEnvError
			if errors.Is(err, runtime.ErrUnavailable) {
				return err
			}
			return nil
		}
		e.Capture.WriteStart(start)
		h.Start = &start
	}
	res, err := runtime.Rollout(ctx, e.Replica.Sandbox, pol, h, lim, sink)
	if rec, ok := pol.(Recorded); ok {
		agent, blobs := rec.EpisodeRecord()
		if agent != "" {
			e.Row.Agent = &agent
		}
		e.Capture.AddBlobs(blobs)
	}
	if err != nil {
		res.Exit, res.Detail = runtime.ExitUnknown, err.Error()
		e.Broken = true
	}
	e.Result = res
	e.Row.ExitReason, e.Row.Detail, e.Row.Answer = string(res.Exit), res.Detail, res.Answer
	e.Row.DurationMS = schemas.Millis(time.Since(began))
	e.Row.PolicyMS, e.Row.EnvMS = schemas.Millis(res.PolicyTime), schemas.Millis(res.EnvTime)
	if res.Exit == runtime.ExitEnvError {
		e.Broken = true
	}
	if err != nil {
		return err
	}
	if res.Err != nil && errors.Is(res.Err, runtime.ErrUnavailable) {
		return res.Err
	}
	return nil
}

// Recorded is a policy that keeps a record of its episode beside the
// steps: the agent policy's (the episodes table's agent column, as JSON)
// and the blobs it names (the harness's output, its side calls). The
// runner asks for it once the rollout returned.
type Recorded interface {
	EpisodeRecord() (agentJSON string, blobs []schemas.BlobRow)
}

// SpecShaper is a policy source whose policies need something of every
// sandbox they run in, shaped into its Spec once the provider is known —
// the agent policy: its harness's install, forkline's relay and the
// gateway's socket, mounted read-only (nothing on the local provider,
// whose commands see the host). ShapeSpec is called for every template
// before the first sandbox is made; an error refuses the run.
type SpecShaper interface {
	ShapeSpec(prov providers.Provider, spec *providers.Spec) error
}

// ShapeTemplates applies src's ShapeSpec, when it has one, to every
// template.
func ShapeTemplates(src any, prov providers.Provider, templates map[string]*pool.Template) error {
	sh, ok := src.(SpecShaper)
	if !ok {
		return nil
	}
	for _, t := range templates {
		if err := sh.ShapeSpec(prov, &t.Spec); err != nil {
			return err
		}
	}
	return nil
}

// startObserver is a session that shows something before it is acted on:
// the browser session's start page (browser.Session.Observe).
type startObserver interface {
	Observe(ctx context.Context) (runtime.Observation, error)
}

// Verify runs the task's verifier in the sandbox and records its reward
// rows, unless there is nothing to verify: the task has no verifier or the
// sandbox broke. It reports whether the verifier ran to a reward row.
//
// The verifier's hidden files go in first, only now that the episode is
// over, so the agent could neither read nor rewrite them: the directories
// Verify.Clear names are emptied (nothing the agent left there counts), the
// paths of files bound for the workspace are removed, then the files are
// uploaded (providers.Uploader). A failure there is the episode's reward
// row, without a value, saying why.
//
// A stop (ctx done) before the verifier or while it runs leaves the
// episode Interrupted: kept as cancelled, without a reward, so that a
// resumed run runs it again. A reward is never taken from a verifier the
// stop may have cut short, and an episode is never kept as done with the
// reward it did not get.
//
// The error is the verifier's session failing: the episode is then Broken
// and kept as env_error (a scaffold loss, not a task outcome), its reward
// row, without a value, saying why; one wrapping runtime.ErrUnavailable is
// the run's failure.
func (e *Episode) Verify(ctx context.Context) (ran bool, err error) {
	v := e.Task.Verify
	if v == nil || e.Broken {
		return false, nil
	}
	if ctx.Err() != nil {
		if e.Row.ExitReason != string(runtime.ExitCancelled) {
			e.Interrupted(fmt.Sprintf("stopped before its verifier ran (%v): kept as cancelled, without a reward, so that a resumed run runs it again", context.Cause(ctx)))
		}
		return false, nil
	}
	began := time.Now()
	rw := schemas.RewardRow{EpisodeID: e.Row.EpisodeID, Name: task.RewardName, Source: v.Cmd}
	e.Reward = &rw
	stopped := func(during error) bool {
		if ctx.Err() == nil {
			return false
		}
		why := fmt.Sprint(context.Cause(ctx))
		if during != nil {
			why = during.Error()
		}
		e.Row.VerifyMS = schemas.Millis(time.Since(began))
		e.Interrupted("stopped while its verifier ran (" + why + "): kept as cancelled, without a reward, so that a resumed run runs it again")
		return true
	}
	sessionFailed := func(err error) {
		e.Broken = true
		e.Row.ExitReason = string(runtime.ExitEnvError)
		e.Row.Detail = "the verifier's session failed: " + err.Error()
	}
	if detail, perr := e.placeHiddenFiles(ctx, v); perr != nil || detail != "" {
		if stopped(perr) {
			return false, nil
		}
		e.Row.VerifyMS = schemas.Millis(time.Since(began))
		rw.Detail = detail
		if perr != nil {
			rw.Detail = perr.Error()
			sessionFailed(perr)
		}
		return true, perr
	}
	r, err := v.Run(ctx, e.Replica.Sandbox)
	if stopped(err) {
		return false, nil
	}
	e.Row.VerifyMS = schemas.Millis(time.Since(began))
	rw.Value, rw.Detail, rw.ExitCode = r.Value, r.Detail, int32(r.ExitCode)
	if err != nil {
		rw.Detail = err.Error()
		if errors.Is(err, task.ErrEnvUnset) {
			return true, nil // the run's configuration, not the sandbox
		}
		sessionFailed(err)
		return true, err
	}
	for _, m := range r.Metrics {
		e.Metrics = append(e.Metrics, schemas.RewardRow{EpisodeID: e.Row.EpisodeID, Name: m.Name, Value: m.Value,
			Source: v.Cmd, Detail: m.Detail, ExitCode: int32(r.ExitCode)})
	}
	return true, nil
}

// placeHiddenFiles empties v.Clear and puts v's hidden files under v.Dir.
// It returns why it could not (detail, the reward row's), or an error when
// the sandbox itself failed.
func (e *Episode) placeHiddenFiles(ctx context.Context, v *task.Verify) (detail string, err error) {
	sb := e.Replica.Sandbox
	exec := func(what, cmd string) (string, error) {
		obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: cmd, TimeoutMS: 60_000})
		if err != nil {
			return "", fmt.Errorf("episode: verify: %s: %w", what, err)
		}
		if obs.ExitCode != 0 || obs.TimedOut {
			return fmt.Sprintf("verify: %s failed (exit %d): %s", what, obs.ExitCode, strings.TrimSpace(obs.Text())), nil
		}
		return "", nil
	}
	if cmd := v.ClearCommand(); cmd != "" {
		if d, err := exec("emptying "+strings.Join(v.Clear, " "), cmd); d != "" || err != nil {
			return d, err
		}
	}
	files := v.HiddenFiles()
	if len(files) == 0 {
		return "", nil
	}
	if v.Dir == "" {
		// Whatever the agent left at these paths — a file, a directory, a
		// symlink — goes: the task's own files take their place.
		names := make([]string, len(files))
		for i, f := range files {
			names[i] = task.ShellQuote(f.Path)
		}
		if d, err := exec("removing what the episode left at the verifier's paths", "rm -rf -- "+strings.Join(names, " ")); d != "" || err != nil {
			return d, err
		}
	}
	up, ok := providers.AsSandbox[providers.Uploader](sb)
	if !ok {
		return fmt.Sprintf("verify: the sandbox (%s) cannot take the verifier's hidden files", sb.Info().Provider), nil
	}
	place := make([]providers.File, len(files))
	for i, f := range files {
		place[i] = providers.File{Path: f.Path, Data: f.Data, Mode: 0o644}
		if f.Executable {
			place[i].Mode = 0o755
		}
	}
	if err := up.Upload(ctx, v.Dir, place); err != nil {
		if errors.Is(err, runtime.ErrUnavailable) || errors.Is(err, providers.ErrClosed) || ctx.Err() != nil {
			return "", fmt.Errorf("episode: verify: placing the hidden files: %w", err)
		}
		return "verify: placing the hidden files: " + err.Error(), nil
	}
	return "", nil
}

// Rows builds the episode's rows: the episode row with its step count and
// token record, the steps and blobs captured, and the reward. keep is false
// for an episode cancelled before its first step: there is nothing to keep,
// and leaving it out lets a resumed run do it. A token record that breaks
// its invariants is left out and the detail says why: the steps still hold
// the per-turn tokens, but a trainer must never get wrong ones.
func (e *Episode) Rows() (b shard.EpisodeBatch, keep bool) {
	steps := e.Capture.Steps()
	if e.Row.ExitReason == string(runtime.ExitCancelled) && len(steps) == 0 {
		return shard.EpisodeBatch{}, false
	}
	ep := e.Row
	ep.Steps = int32(len(steps))
	e.Capture.StartRow(&ep)
	if err := e.Capture.TokenRecord(&ep); err != nil {
		ep.Detail = strings.TrimSpace(ep.Detail + "; token record refused: " + err.Error())
	}
	b = shard.EpisodeBatch{Episode: ep, Steps: steps, Blobs: e.Capture.Blobs()}
	e.built = &b.Episode
	if e.Reward != nil {
		b.Rewards = append([]schemas.RewardRow{*e.Reward}, e.Metrics...)
	}
	return b, true
}

// Outcome is what the pool should do with the replica: replace it when the
// sandbox broke under the episode.
func (e *Episode) Outcome() pool.Outcome {
	if e.Broken {
		return pool.Broken
	}
	return pool.Done
}
