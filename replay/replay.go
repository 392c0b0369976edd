// Package replay re-runs stored episodes and reports where they diverge: it
// rebuilds each task's golden state from the specs recorded in a dataset's
// manifest (on the same or another provider), forks replicas through the
// pool, re-executes every episode's recorded canonical actions in order, and
// compares each new observation and the final reward with the recorded ones.
//
// It reads datasets (formats/shard) and drives providers through the pool;
// it does not write datasets or know any trainer format.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/policy/script"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	_ "github.com/forkline/forkline/providers/all" // Run opens providers by name
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// Mode is how observations are compared. Exit codes, error flags and
// timeouts are always compared exactly.
type Mode string

// Comparison modes.
const (
	// Exact compares output bytes as recorded.
	Exact Mode = "exact"
	// Normalized strips ANSI escape sequences and trailing whitespace and
	// applies the masks before comparing.
	Normalized Mode = "normalized"
	// Hash compares sha256 digests only (the report shows digests, not text).
	Hash Mode = "hash"
)

// DefaultMasks are applied in Normalized mode, in order. Each replaces what
// legitimately differs between two runs of the same environment.
var DefaultMasks = []Mask{
	{Name: "iso-timestamp", Pattern: regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?`), Replace: "<TIME>"},
	{Name: "forkline-workspace", Pattern: regexp.MustCompile(`(/[^\s'"]*)?/forkline-[^\s'"/]+(/[^\s'"/]+)*/ws\b|/workspace\b`), Replace: "<WORKSPACE>"},
	{Name: "tmp-path", Pattern: regexp.MustCompile(`/tmp/[A-Za-z0-9._-]+`), Replace: "<TMP>"},
	{Name: "hex-id", Pattern: regexp.MustCompile(`\b[0-9a-f]{12,64}\b`), Replace: "<HEX>"},
}

// Mask is a named regular expression whose matches are replaced before
// comparison in Normalized mode.
type Mask struct {
	Name    string
	Pattern *regexp.Regexp
	Replace string
}

// Config configures a replay.
type Config struct {
	In             string // the dataset to replay
	Provider       string // default: the provider the dataset was collected with
	ProviderParams map[string]string
	Image          string // override every task's image (docker)
	// TaskFiles, when set, replaces the recorded specs with the specs of the
	// same ids read from these files (a changed setup, a new version of a
	// task): the replay then shows what the change does to stored episodes.
	TaskFiles  string
	Tasks      []string // only these task ids (empty: all)
	EpisodeIDs []string // only these episode ids or id prefixes (empty: all)
	Mode       Mode
	Masks      []Mask // Normalized mode; nil means DefaultMasks
	Replicas   int
	WorkDir    string
	Log        io.Writer
	// PixelTolerance, when above 0, lets screenshots whose hashes differ
	// still match when at most this fraction of their pixels differ (same
	// size required); 0 compares screenshots by hash.
	PixelTolerance float64
	// Record, when set, writes the replayed episodes as a new dataset there
	// (re-capture under another provider or image), with the same episode
	// ids and the replayed rewards.
	Record string
}

// Status of one replayed episode.
type Status string

// Statuses.
const (
	Identical Status = "identical"
	Diverged  Status = "diverged"
	Errored   Status = "error"
)

// StepDiff describes the first difference in an episode.
type StepDiff struct {
	Step     int    `json:"step"`
	Action   string `json:"action"`
	Field    string `json:"field"` // output, exit_code, is_error, timed_out, steps, reward
	Recorded string `json:"recorded"`
	Replayed string `json:"replayed"`
	Diff     string `json:"diff"` // a readable line diff for output
	// Screenshots of the divergent step, for the HTML report.
	RecordedPNG []byte `json:"-"`
	ReplayedPNG []byte `json:"-"`
}

// EpisodeReport is the outcome of one replayed episode.
type EpisodeReport struct {
	EpisodeID      string    `json:"episode_id"`
	TaskID         string    `json:"task_id"`
	Status         Status    `json:"status"`
	Steps          int       `json:"steps"`
	Matched        int       `json:"steps_matched"`
	First          *StepDiff `json:"first_divergence,omitempty"`
	RewardRecorded *float64  `json:"reward_recorded"`
	RewardReplayed *float64  `json:"reward_replayed"`
	RewardChanged  bool      `json:"reward_changed"`
	Error          string    `json:"error,omitempty"`
}

// Report is the whole replay.
type Report struct {
	Dataset   string          `json:"dataset"`
	Provider  string          `json:"provider"`
	Mode      Mode            `json:"mode"`
	Masks     []string        `json:"masks,omitempty"`
	Identical int             `json:"identical"`
	Diverged  int             `json:"diverged"`
	Errored   int             `json:"errored"`
	Episodes  []EpisodeReport `json:"episodes"`
}

// ErrNoEpisodes is returned when the filters select nothing.
var ErrNoEpisodes = errors.New("replay: no episode matches the filters")

// Run replays the selected episodes of cfg.In. The error is for a replay
// that could not run at all; per-episode failures are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Mode == "" {
		cfg.Mode = Exact
	}
	switch cfg.Mode {
	case Exact, Normalized, Hash:
	default:
		return nil, fmt.Errorf("replay: unknown compare mode %q (known: exact, hash, normalized)", cfg.Mode)
	}
	if cfg.Masks == nil {
		cfg.Masks = DefaultMasks
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 4
	}
	ds, err := shard.Open(cfg.In)
	if err != nil {
		return nil, err
	}
	m := ds.Manifest()
	specs, err := task.DecodeRecords(m.Tasks)
	if err != nil {
		return nil, err
	}
	if cfg.TaskFiles != "" {
		loaded, err := task.Load(cfg.TaskFiles)
		if err != nil {
			return nil, err
		}
		replaced := 0
		for _, s := range loaded {
			if _, ok := specs[s.ID]; ok {
				specs[s.ID] = s.WithDefaults()
				replaced++
			}
		}
		if replaced == 0 {
			return nil, fmt.Errorf("replay: %s holds none of the dataset's tasks (%s)", cfg.TaskFiles, strings.Join(sortedKeys(specs), ", "))
		}
	}
	for _, id := range cfg.Tasks {
		if _, ok := specs[id]; !ok {
			return nil, fmt.Errorf("replay: task %q is not in %s (it has: %s)", id, cfg.In, strings.Join(sortedKeys(specs), ", "))
		}
	}
	if cfg.Provider == "" {
		var rec struct {
			Name string `json:"name"`
		}
		json.Unmarshal(m.Provider, &rec)
		cfg.Provider = rec.Name
		if cfg.Provider == "" {
			cfg.Provider = "local"
		}
	}
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "replay: "+format+"\n", args...)
		}
	}
	prov, err := providers.Open(ctx, cfg.Provider, providers.Options{RunID: "replay-" + m.RunID, Dir: cfg.WorkDir, Params: cfg.ProviderParams})
	if err != nil {
		return nil, err
	}
	// As the collector does: remove what crashed runs left before making
	// more (opening the provider removes nothing); a failed sweep is logged.
	if sw, ok := providers.As[providers.Sweeper](prov); ok {
		if err := sw.Sweep(ctx); err != nil {
			if ctx.Err() != nil {
				prov.Close(context.WithoutCancel(ctx))
				return nil, fmt.Errorf("replay: %w", ctx.Err())
			}
			logf("sweeping leftovers of crashed runs: %v", err)
		}
	}
	// Browser tasks replay with a browser, as they were collected.
	list := make([]task.Spec, 0, len(specs))
	for _, s := range specs {
		list = append(list, s)
	}
	if prov, err = collect.WithBrowsers(prov, list); err != nil {
		return nil, err
	}
	defer prov.Close(context.WithoutCancel(ctx))
	pl, err := pool.New(pool.Config{Provider: prov, Replicas: cfg.Replicas, Log: logf})
	if err != nil {
		return nil, err
	}
	defer pl.Close(context.WithoutCancel(ctx))

	capPolicy, err := recordedCapture(m)
	if err != nil {
		return nil, err
	}
	if cfg.PixelTolerance < 0 || cfg.PixelTolerance >= 1 {
		return nil, fmt.Errorf("replay: pixel tolerance %g must be in [0, 1)", cfg.PixelTolerance)
	}
	rp := &replayer{cfg: cfg, capture: capPolicy, ds: ds}
	if cfg.Record != "" {
		if rp.rec, err = newRecording(cfg, m, specs, prov.Name()); err != nil {
			return nil, err
		}
	}
	templates := map[string]*pool.Template{}
	for id, s := range specs {
		if cfg.Image != "" {
			s.Image = cfg.Image
		}
		spec := s
		templates[id] = collect.Template(&spec)
	}

	rep := &Report{Dataset: cfg.In, Provider: prov.Name(), Mode: cfg.Mode}
	if cfg.Mode == Normalized {
		for _, mk := range cfg.Masks {
			rep.Masks = append(rep.Masks, mk.Name+": "+mk.Pattern.String())
		}
	}
	var mu sync.Mutex
	jobs := make(chan pool.Job)
	var feedErr error
	go func() {
		defer close(jobs)
		feedErr = ds.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
			if !selected(cfg, ep) {
				return nil
			}
			spec := specs[ep.TaskID]
			j := &recorded{ep: ep, steps: steps, spec: &spec}
			for _, r := range rewards {
				if r.StepIndex == nil && r.Name == "verify" {
					j.reward, j.hasReward = r.Value, true
				}
			}
			select {
			case jobs <- pool.Job{Template: templates[ep.TaskID], Payload: j}:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	pl.Run(ctx, jobs, func(ctx context.Context, job pool.Job, r pool.Replica, acqErr error) pool.Outcome {
		j := job.Payload.(*recorded)
		er, out := rp.episode(ctx, j, r, acqErr)
		mu.Lock()
		rep.Episodes = append(rep.Episodes, er)
		mu.Unlock()
		return out
	})
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
	sort.Slice(rep.Episodes, func(a, b int) bool {
		x, y := rep.Episodes[a], rep.Episodes[b]
		if x.TaskID != y.TaskID {
			return x.TaskID < y.TaskID
		}
		return x.EpisodeID < y.EpisodeID
	})
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
	return rep, nil
}

// recordedCapture reads the capture policy a dataset was collected with; a
// replay compares under the same policy (text cap, pixels) so that both sides
// keep the same view of every observation.
func recordedCapture(m shard.Manifest) (capture.Policy, error) {
	p := capture.DefaultPolicy()
	if m.Capture == nil {
		return p, nil
	}
	var rec struct{ Text, Pixels, A11y, Tokens string }
	if err := json.Unmarshal(m.Capture, &rec); err != nil {
		return p, fmt.Errorf("replay: manifest capture policy unreadable: %w", err)
	}
	cap, err := capture.ParseText(rec.Text)
	if err != nil {
		return p, err
	}
	p.TextCap = cap
	p.Pixels = "none" // screenshots are compared by hash, which is always kept
	return p, nil
}

func selected(cfg Config, ep schemas.EpisodeRow) bool {
	if len(cfg.Tasks) > 0 && !contains(cfg.Tasks, ep.TaskID) {
		return false
	}
	if len(cfg.EpisodeIDs) == 0 {
		return true
	}
	for _, p := range cfg.EpisodeIDs {
		if strings.HasPrefix(ep.EpisodeID, p) {
			return true
		}
	}
	return false
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]task.Spec) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// recorded is one stored episode to replay.
type recorded struct {
	ep        schemas.EpisodeRow
	steps     []schemas.StepRow
	spec      *task.Spec
	reward    *float64
	hasReward bool
}

// replayer replays episodes of one dataset.
type replayer struct {
	cfg     Config
	capture capture.Policy // the recording's policy
	ds      *shard.Dataset
	rec     *recording // nil unless Config.Record
}

func (rp *replayer) episode(ctx context.Context, j *recorded, r pool.Replica, acqErr error) (EpisodeReport, pool.Outcome) {
	er, out, rows := rp.replay(ctx, j, r, acqErr)
	if rp.rec != nil && er.Status != Errored {
		if err := rp.rec.commit(ctx, j, er, rows); err != nil {
			er.Status, er.Error = Errored, "recording: "+err.Error()
		}
	}
	return er, out
}

func (rp *replayer) replay(ctx context.Context, j *recorded, r pool.Replica, acqErr error) (EpisodeReport, pool.Outcome, *comparer) {
	cfg := rp.cfg
	er := EpisodeReport{EpisodeID: j.ep.EpisodeID, TaskID: j.ep.TaskID, Steps: len(j.steps), RewardRecorded: j.reward}
	if acqErr != nil {
		er.Status, er.Error = Errored, acqErr.Error()
		return er, pool.Done, nil
	}
	var actions []runtime.Action
	for _, s := range j.steps {
		var a runtime.Action
		if err := json.Unmarshal([]byte(s.ActionJSON), &a); err != nil {
			er.Status, er.Error = Errored, fmt.Sprintf("step %d: recorded action unreadable: %v", s.StepIndex, err)
			return er, pool.Done, nil
		}
		if a.Kind == "" {
			break // a model turn without an action ends the recorded episode
		}
		actions = append(actions, a)
	}
	cmp := &comparer{cfg: cfg, capture: rp.capture, rec: j.steps, blob: rp.ds.Blob,
		episodeID: j.ep.EpisodeID, taskID: j.ep.TaskID, recording: rp.rec != nil, seenBlobs: capture.SetIndex{}}
	lim := j.spec.Limits.Runtime()
	lim.MaxSteps = len(actions) + 1
	res, err := runtime.Rollout(ctx, r.Sandbox, script.New(actions), runtime.History{Instruction: j.spec.Instruction}, lim, cmp)
	cmp.result = res
	if err != nil {
		er.Status, er.Error = Errored, err.Error()
		return er, pool.Broken, nil
	}
	er.Matched = cmp.matched
	er.First = cmp.first
	if res.Exit == runtime.ExitEnvError {
		er.Status, er.Error = Errored, "sandbox failed: "+res.Detail
		return er, pool.Broken, nil
	}
	if er.First == nil && cmp.seen < len(actions) {
		er.First = &StepDiff{Step: cmp.seen, Field: "steps", Recorded: fmt.Sprint(len(actions)), Replayed: fmt.Sprint(cmp.seen),
			Diff: fmt.Sprintf("the replay ended after %d of %d recorded actions (%s: %s)", cmp.seen, len(actions), res.Exit, res.Detail)}
	}
	if j.hasReward && j.spec.Verify != nil && ctx.Err() == nil {
		rw, verr := j.spec.Verify.Run(ctx, r.Sandbox)
		if verr != nil {
			er.Status, er.Error = Errored, verr.Error()
			return er, pool.Broken, nil
		}
		cmp.reward = &rw
		er.RewardReplayed = rw.Value
		er.RewardChanged = !sameReward(j.reward, rw.Value)
		if er.RewardChanged && er.First == nil {
			er.First = &StepDiff{Step: len(actions), Field: "reward", Recorded: fmtReward(j.reward), Replayed: fmtReward(rw.Value),
				Diff: "the final verification reward changed although every step matched"}
		}
	}
	if er.First != nil {
		er.Status = Diverged
	} else {
		er.Status = Identical
	}
	return er, pool.Done, cmp
}

func sameReward(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func fmtReward(v *float64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}
