// Package inspect says what a dataset holds, without SQL: its status, plan,
// provider, policy and capture policy, episodes by task and exit reason,
// the reward distribution, reset latency by strategy and fork method, token
// coverage and drift (why records were cut, and which servers, templates and
// token paths the model turns' ids came from), bytes per table and per
// step, and the problems
// formats/shard's Verify finds (Summarize); and one episode as a readable
// transcript — the instruction, each action, its observation as the model
// saw it (aci.ObservationText, the rendering policies and exports use),
// the model's text and reasoning, the rewards — with its screenshots
// written out as PNG files (Transcripts).
//
// It reads datasets through formats/shard only and streams them: what it
// keeps grows with the number of tasks, reset strategies and distinct
// reward values (all bounded), never with the number of episodes or steps.
// It must not know how a dataset was collected (providers, pools, policies
// at run time) or the layout of any trainer format, and it writes nothing
// into a dataset. It prints nothing either: Summary and Transcript are data
// (their JSON is what inspect -json prints), and internal/ui turns them
// into the text inspect prints. Observations are rendered by the export model's
// ToolResult (formats/model), so a transcript shows exactly what the
// chat exports write.
package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// Sentinel errors; the errors of this package wrap one of them and name the
// file concerned.
var (
	// ErrNotDataset: the directory is not a forkline dataset (no
	// manifest.json, or one this build cannot read).
	ErrNotDataset = errors.New("inspect: not a dataset")
	// ErrDamaged: a forkline dataset that does not match its manifest (a
	// shard's hash, size or rows, a missing file, an unreadable record).
	// Summarize returns its Summary with the problems alongside.
	ErrDamaged = errors.New("inspect: damaged dataset")
	// ErrNoMatch: an -episode prefix matches no episode, or more than one.
	ErrNoMatch = errors.New("inspect: no such episode")
)

// DefaultReward is the reward whose distribution Summarize reports unless
// told otherwise: the one the task's verifier gives.
const DefaultReward = "verify"

// Options configure Summarize.
type Options struct {
	// Reward names the episode-level reward whose distribution is
	// reported; DefaultReward when empty.
	Reward string
}

// Summary is what a dataset holds. Its JSON form is what inspect -json
// prints.
type Summary struct {
	Dir           string       `json:"dir"`
	Status        shard.Status `json:"status"`
	RunID         string       `json:"run_id"`
	Tool          string       `json:"tool"`
	ToolVersion   string       `json:"tool_version"`
	SchemaVersion int          `json:"schema_version"`
	CreatedAt     time.Time    `json:"created_at"`
	UpdatedAt     time.Time    `json:"updated_at"`

	// The manifest's entries, by the types every command writes them
	// with (manifest).
	Plan     *manifest.Plan     `json:"plan,omitempty"`
	Provider *manifest.Provider `json:"provider,omitempty"`
	Policy   *manifest.Policy   `json:"policy,omitempty"`
	Capture  map[string]string  `json:"capture,omitempty"`

	// Problems are what Verify found (each names its file), and records of
	// the manifest that cannot be read. A dataset with problems has no
	// row sections below: its readers refuse it.
	Problems []string `json:"problems"`
	// Leftovers of a crash and foreign files: not problems.
	Unlisted []string `json:"unlisted"`
	Foreign  []string `json:"foreign"`

	Episodes int64          `json:"episodes"`
	Steps    int64          `json:"steps"`
	ByExit   map[string]int `json:"by_exit_reason"`
	Losses   int            `json:"scaffold_losses"`
	Tasks    []TaskSummary  `json:"tasks"`

	Reward       Rewards            `json:"reward"`
	OtherRewards []RewardName       `json:"other_rewards,omitempty"`
	Reset        []Latency          `json:"reset_ms"`
	GoldenBuild  map[string]float64 `json:"golden_build_ms,omitempty"`
	Tokens       Tokens             `json:"tokens"`
	Bytes        Bytes              `json:"bytes"`
}

// TaskSummary is one task's episodes.
type TaskSummary struct {
	ID          string         `json:"id"`
	Hash        string         `json:"hash,omitempty"`
	Instruction string         `json:"instruction,omitempty"`
	Episodes    int            `json:"episodes"`
	Steps       int64          `json:"steps"`
	ByExit      map[string]int `json:"by_exit_reason"`
	// FirstByExit names the first episode of each exit reason: a handle
	// for inspect -episode.
	FirstByExit map[string]string `json:"first_episode_by_exit_reason"`
	Rewarded    int               `json:"rewarded"`
	RewardMean  *float64          `json:"reward_mean"`
	rewardSum   float64
}

// Rewards is the distribution of one episode-level reward.
type Rewards struct {
	Name  string   `json:"name"`
	Count int      `json:"count"` // episodes with a value
	Null  int      `json:"null"`  // episodes whose verifier gave none
	Mean  *float64 `json:"mean"`
	Min   *float64 `json:"min"`
	Max   *float64 `json:"max"`
	// Values counts each distinct value when there are few; otherwise
	// Histogram counts equal bins over [Min, Max].
	Values    []ValueCount `json:"values,omitempty"`
	Histogram []Bin        `json:"histogram,omitempty"`
}

// ValueCount is how many episodes got one reward value.
type ValueCount struct {
	Value float64 `json:"value"`
	Count int     `json:"count"`
}

// Bin is one histogram bin: Low <= v < High (the last bin includes High).
type Bin struct {
	Low   float64 `json:"low"`
	High  float64 `json:"high"`
	Count int     `json:"count"`
}

// RewardName counts the rows of a reward other than the one reported.
type RewardName struct {
	Name         string `json:"name"`
	EpisodeLevel int    `json:"episode_level"`
	StepLevel    int    `json:"step_level"`
}

// Latency is the reset latency of one strategy and fork method: the
// distribution every command reports (manifest.Latency, by the one
// quantile rule), keyed.
type Latency struct {
	Key      string `json:"key"`      // "fork/overlay"
	Strategy string `json:"strategy"` // fork | recreate
	Origin   string `json:"origin"`   // overlay, copy, image, create, branch ...
	manifest.Latency
	// Exact is false when N exceeds the sample the quantiles come from.
	Exact bool `json:"exact"`
}

// Tokens is the token coverage: episodes whose row holds an assembled
// token record, those flagged with token drift (their records cut, Cut
// saying why), and where the model turns' ids came from.
type Tokens struct {
	WithRecord int            `json:"episodes_with_token_record"`
	Drift      int            `json:"episodes_with_token_drift"`
	Cut        map[string]int `json:"token_cut,omitempty"` // by token_cut: drift, missing_ids
	Turns      int            `json:"token_turns"`         // model turns in the records
	// Sources are the model turns of every step by how their ids were
	// made (token path and endpoints), the server's model name and the
	// chat template's hash: more than one means the dataset mixes servers,
	// templates or token paths.
	Sources []TokenSource `json:"token_sources,omitempty"`
}

// TokenSource is one way model turns got their token ids.
type TokenSource struct {
	Path           string `json:"token_path"`      // chat or tito; "" when not recorded
	Endpoints      string `json:"token_endpoints"` // comma-separated server paths
	Model          string `json:"model"`
	TemplateSHA256 string `json:"chat_template_sha256,omitempty"`
	Turns          int    `json:"turns"`
}

// maxTokenSources bounds the sources kept: a dataset that somehow mixes
// more is summarised by its most common ones (Sources) and a count.
const maxTokenSources = 64

// stepProvenance is the steps table's provenance columns: Summarize reads
// only these of it.
type stepProvenance struct {
	Model              *string `parquet:"model,optional"`
	TokenPath          *string `parquet:"token_path,optional"`
	TokenEndpoints     *string `parquet:"token_endpoints,optional"`
	ChatTemplateSHA256 *string `parquet:"chat_template_sha256,optional"`
}

// readTokenSources counts the model turns of the steps table by source.
func (s *Summary) readTokenSources(ctx context.Context, ds *shard.Dataset) error {
	counts := map[TokenSource]int{}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	n := 0
	for p, err := range shard.Project[stepProvenance](ds, schemas.TableSteps) {
		if err != nil {
			return err
		}
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if p.Model == nil {
			continue // not a model turn
		}
		k := TokenSource{Path: str(p.TokenPath), Endpoints: str(p.TokenEndpoints), Model: str(p.Model), TemplateSHA256: str(p.ChatTemplateSHA256)}
		if _, seen := counts[k]; !seen && len(counts) >= maxTokenSources {
			k = TokenSource{Path: "other"}
		}
		counts[k]++
	}
	for k, v := range counts {
		k.Turns = v
		s.Tokens.Sources = append(s.Tokens.Sources, k)
	}
	slices.SortFunc(s.Tokens.Sources, func(a, b TokenSource) int {
		if a.Turns != b.Turns {
			return b.Turns - a.Turns
		}
		return strings.Compare(a.Path+a.Endpoints+a.Model+a.TemplateSHA256, b.Path+b.Endpoints+b.Model+b.TemplateSHA256)
	})
	return nil
}

// MixedSources reports whether the model turns came from more than one
// model, chat template or token path.
func (t Tokens) MixedSources() bool { return len(t.Sources) > 1 }

// Bytes is what the dataset takes on disk.
type Bytes struct {
	Tables       []TableBytes `json:"tables"`
	Total        int64        `json:"total"`
	PerStep      float64      `json:"per_step"`       // all shards' bytes / steps
	StepsPerStep float64      `json:"steps_per_step"` // the steps table's bytes / steps
}

// TableBytes is one table's shards.
type TableBytes struct {
	Table  string `json:"table"`
	Shards int    `json:"shards"`
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
}

// testHookEpisode, when set (by tests), is called after each episode row
// Summarize reads, with the count so far.
var testHookEpisode func(n int64)

// Summarize reads the dataset in dir. It fails with ErrNotDataset for a
// directory that is not one, and with ErrDamaged — returning the Summary of
// what the manifest says, with the problems — for a dataset that does not
// match its manifest.
func Summarize(ctx context.Context, dir string, o Options) (*Summary, error) {
	if o.Reward == "" {
		o.Reward = DefaultReward
	}
	rep, err := verify(dir)
	if err != nil {
		return nil, err
	}
	ds, err := shard.Open(dir)
	if err != nil {
		return nil, classify(dir, err)
	}
	m := ds.Manifest()
	s := &Summary{Dir: dir, Status: m.Status, RunID: m.RunID, Tool: m.Tool, ToolVersion: m.ToolVersion,
		SchemaVersion: m.SchemaVersion, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt,
		Problems: slices.Clone(rep.Problems), Unlisted: nonNil(rep.Unlisted), Foreign: nonNil(rep.Foreign),
		ByExit: map[string]int{}, Tasks: []TaskSummary{}, Reset: []Latency{}}
	if s.Problems == nil {
		s.Problems = []string{}
	}
	s.Bytes = bytesOf(ds, m)
	specs := s.readManifest(m)
	if len(s.Problems) > 0 {
		return s, fmt.Errorf("%w: %s: %s", ErrDamaged, dir, strings.Join(s.Problems, "; "))
	}
	if err := s.readRows(ctx, ds, specs, o.Reward); err != nil {
		return s, err
	}
	if err := s.readTokenSources(ctx, ds); err != nil {
		return s, err
	}
	return s, nil
}

// verify runs formats/shard's Verify and classifies a dataset it cannot
// check at all.
func verify(dir string) (shard.Report, error) {
	if fi, err := os.Stat(dir); err != nil {
		return shard.Report{}, fmt.Errorf("%w: %v", ErrNotDataset, err)
	} else if !fi.IsDir() {
		return shard.Report{}, fmt.Errorf("%w: %s is not a directory", ErrNotDataset, dir)
	}
	rep, err := shard.Verify(dir)
	if err != nil {
		return rep, classify(dir, err)
	}
	return rep, nil
}

// classify maps a formats/shard error to ErrNotDataset or ErrDamaged,
// keeping its message (which names the file).
func classify(dir string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, shard.ErrNoDataset), errors.Is(err, shard.ErrSchemaVersion):
		return fmt.Errorf("%w: %v", ErrNotDataset, err)
	default:
		return fmt.Errorf("%w: %v", ErrDamaged, err)
	}
}

// readManifest fills what the manifest says and returns the recorded task
// specs; a record it cannot read is a problem.
func (s *Summary) readManifest(m shard.Manifest) map[string]task.Spec {
	problem := func(what string, err error) {
		s.Problems = append(s.Problems, fmt.Sprintf("%s/%s: %s: %v", s.Dir, shard.ManifestFile, what, err))
	}
	entries, problems := manifest.Read(m)
	for _, p := range problems {
		var e *manifest.EntryError
		if errors.As(p, &e) {
			problem(e.Entry, e.Err)
		} else {
			problem("entry", p)
		}
	}
	s.Plan, s.Provider, s.Policy = entries.Plan, entries.Provider, entries.Policy
	if len(m.Capture) > 0 {
		// Values are shown as recorded: strings as they are, anything
		// else as its JSON.
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(m.Capture, &raw); err != nil {
			problem("capture", err)
		} else {
			s.Capture = map[string]string{}
			for k, v := range raw {
				var str string
				if json.Unmarshal(v, &str) != nil {
					str = string(v)
				}
				s.Capture[k] = str
			}
		}
	}
	specs := map[string]task.Spec{}
	if len(m.Tasks) > 0 {
		var err error
		if specs, err = task.DecodeRecords(m.Tasks); err != nil {
			problem("tasks", err)
			specs = map[string]task.Spec{}
		}
	}
	return specs
}

// bytesOf sums the listed shards by table.
func bytesOf(ds *shard.Dataset, m shard.Manifest) Bytes {
	var b Bytes
	for _, t := range schemas.Tables {
		tb := TableBytes{Table: t, Rows: m.Counts[t]}
		for _, sh := range ds.Shards(t) {
			tb.Shards++
			tb.Bytes += sh.Bytes
		}
		b.Total += tb.Bytes
		b.Tables = append(b.Tables, tb)
	}
	if steps := m.Counts[schemas.TableSteps]; steps > 0 {
		b.PerStep = float64(b.Total) / float64(steps)
		b.StepsPerStep = float64(b.Tables[0].Bytes) / float64(steps)
	}
	return b
}

// readRows streams the episodes and rewards tables in one pass (each
// episode row with its rewards), and the rewards table a second time only
// when the reward takes too many distinct values to count one by one.
// Reward rows do not carry their task, and an index from episode to task
// would grow with the episodes: pairing each episode with its rewards
// (EachEpisodeRewards, which never reads the steps table) needs none.
func (s *Summary) readRows(ctx context.Context, ds *shard.Dataset, specs map[string]task.Spec, reward string) error {
	tasks := map[string]*TaskSummary{}
	for id, sp := range specs {
		tasks[id] = &TaskSummary{ID: id, Hash: sp.Hash(), Instruction: sp.Instruction, ByExit: map[string]int{}, FirstByExit: map[string]string{}}
	}
	reset := map[string]*manifest.Sample{}
	golden := map[string]float64{}
	tally := newRewardTally()
	others := map[string]*RewardName{}
	err := ds.EachEpisodeRewards(func(ep schemas.EpisodeRow, rewards []schemas.RewardRow) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		t := tasks[ep.TaskID]
		if t == nil {
			t = &TaskSummary{ID: ep.TaskID, ByExit: map[string]int{}, FirstByExit: map[string]string{}}
			tasks[ep.TaskID] = t
		}
		s.addEpisode(ep, t, reset, golden)
		for _, r := range rewards {
			switch {
			case r.Name != reward:
				o := others[r.Name]
				if o == nil {
					o = &RewardName{Name: r.Name}
					others[r.Name] = o
				}
				if r.StepIndex == nil {
					o.EpisodeLevel++
				} else {
					o.StepLevel++
				}
			case r.StepIndex == nil:
				tally.add(r.Value)
				if r.Value != nil {
					t.Rewarded++
					t.rewardSum += *r.Value
				}
			}
		}
		if testHookEpisode != nil {
			testHookEpisode(s.Episodes)
		}
		return nil
	})
	if err != nil {
		return s.damaged(err)
	}
	for _, k := range sortedKeys(reset) {
		r := reset[k]
		strategy, origin, _ := strings.Cut(k, "/")
		s.Reset = append(s.Reset, Latency{Key: k, Strategy: strategy, Origin: origin, Latency: r.Latency(), Exact: r.Exact()})
	}
	if len(golden) > 0 {
		s.GoldenBuild = golden
	}
	for _, id := range sortedKeys(tasks) {
		t := tasks[id]
		if t.Rewarded > 0 {
			m := t.rewardSum / float64(t.Rewarded)
			t.RewardMean = &m
		}
		s.Tasks = append(s.Tasks, *t)
	}
	for _, k := range sortedKeys(others) {
		s.OtherRewards = append(s.OtherRewards, *others[k])
	}
	return s.rewardDistribution(ds, tally, reward)
}

// addEpisode counts one episode row.
func (s *Summary) addEpisode(ep schemas.EpisodeRow, t *TaskSummary, reset map[string]*manifest.Sample, golden map[string]float64) {
	s.Episodes++
	s.Steps += int64(ep.Steps)
	s.ByExit[ep.ExitReason]++
	if runtime.ParseExitReason(ep.ExitReason).ScaffoldLoss() {
		s.Losses++
	}
	t.Episodes++
	t.Steps += int64(ep.Steps)
	t.ByExit[ep.ExitReason]++
	if _, ok := t.FirstByExit[ep.ExitReason]; !ok {
		t.FirstByExit[ep.ExitReason] = ep.EpisodeID
	}
	if ep.ResetMS > 0 { // a replica was really acquired
		key := ep.ResetStrategy
		if ep.ResetOrigin != "" {
			key += "/" + ep.ResetOrigin
		}
		if reset[key] == nil {
			reset[key] = &manifest.Sample{}
		}
		reset[key].Add(ep.ResetMS)
	}
	if ep.GoldenID != "" && ep.GoldenBuildMS > 0 {
		golden[ep.TaskID] = ep.GoldenBuildMS
	}
	if len(ep.ResponseIDs) > 0 || len(ep.PromptIDs) > 0 {
		s.Tokens.WithRecord++
		s.Tokens.Turns += int(ep.TokenTurns)
	}
	if ep.TokenDrift {
		s.Tokens.Drift++
		if ep.TokenCut != nil {
			if s.Tokens.Cut == nil {
				s.Tokens.Cut = map[string]int{}
			}
			s.Tokens.Cut[*ep.TokenCut]++
		}
	}
}

// rewardDistribution fills s.Reward from the first pass's tally, with a
// second pass over the rewards table for a histogram when the values are
// too many to count one by one.
func (s *Summary) rewardDistribution(ds *shard.Dataset, tally *rewardTally, name string) error {
	s.Reward = Rewards{Name: name, Count: tally.count, Null: tally.null}
	if tally.count == 0 {
		return nil
	}
	mean := tally.sum / float64(tally.count)
	lo, hi := tally.min, tally.max
	s.Reward.Mean, s.Reward.Min, s.Reward.Max = &mean, &lo, &hi
	if tally.distinct != nil {
		for _, v := range sortedKeys(tally.distinct) {
			s.Reward.Values = append(s.Reward.Values, ValueCount{Value: v, Count: tally.distinct[v]})
		}
		return nil
	}
	bins := tally.bins()
	for r, err := range ds.Rewards() {
		if err != nil {
			return s.damaged(err)
		}
		if r.Name == name && r.StepIndex == nil && r.Value != nil && !math.IsNaN(*r.Value) {
			bins[binOf(bins, *r.Value)].Count++
		}
	}
	s.Reward.Histogram = bins
	return nil
}

// damaged records a read error (which names its file) as a problem.
func (s *Summary) damaged(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	s.Problems = append(s.Problems, err.Error())
	return fmt.Errorf("%w: %s: %v", ErrDamaged, s.Dir, err)
}

func sortedKeys[K interface{ ~string | ~float64 }, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
