package view

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// Query selects, sorts and pages a run's episodes: the episode list. Every
// filter set must hold (AND); a list filter holds when the episode's value
// is one of its values.
//
// It is the view's own, small on purpose: export's selection (-where,
// -min-reward, -task) filters whole episodes as it exports them, and when a
// shared episode query exists this one should become a call to it.
type Query struct {
	Tasks []string // task_id is one of these
	Exits []string // exit_reason is one of these
	// MinReward and MaxReward bound the episode-level reward (inclusive);
	// an episode without that reward is excluded when either is set.
	MinReward, MaxReward *float64
	Drift                *bool // token_drift is this
	Branch               *bool // the episode is a branch (has a parent) or not
	// Text, when set, keeps the episodes one of whose steps holds it in its
	// action, its observation (the output) or the model's text, case
	// insensitive. Only then is the steps table read.
	Text   string
	Sort   string // one of SortKeys; "" is episode_id
	Desc   bool
	Offset int
	Limit  int // 1..MaxLimit; 0 is DefaultLimit
}

// SortKeys are the columns the episode list sorts by. Ties are broken by
// episode_id, ascending; an episode without the reward sorts last either
// way (SQL's NULLS LAST).
var SortKeys = []string{"episode_id", "task_id", "exit_reason", "reward", "steps", "duration_ms", "reset_ms", "repeat"}

// Paging bounds. The list keeps at most Offset+Limit rows while it streams
// the run (MaxWindow rows of a few hundred bytes: a few tens of MB at
// most, whatever the run's size); a later page of a long sorted list is
// reached by sorting the other way.
const (
	DefaultLimit = 50
	MaxLimit     = 1000
	MaxWindow    = 100_000
)

// Row is one episode of the list.
type Row struct {
	EpisodeID  string   `json:"episode_id"`
	TaskID     string   `json:"task_id"`
	Repeat     int32    `json:"repeat"`
	ExitReason string   `json:"exit_reason"`
	Steps      int32    `json:"steps"`
	DurationMS float64  `json:"duration_ms"`
	ResetMS    float64  `json:"reset_ms"`
	Reward     *float64 `json:"reward"`
	TokenDrift bool     `json:"token_drift"`
	TokenTurns int32    `json:"token_turns"`
	Parent     string   `json:"parent_episode_id,omitempty"`
	BranchStep *int32   `json:"branch_step,omitempty"`
}

// Page is one page of the list: the rows from Offset, and how many
// episodes matched in all.
type Page struct {
	Reward   string `json:"reward"` // the reward the rows carry
	Matched  int    `json:"matched"`
	Scanned  int    `json:"scanned"` // episodes in the run
	Offset   int    `json:"offset"`
	Limit    int    `json:"limit"`
	Episodes []Row  `json:"episodes"`
}

// ErrQuery: a query parameter that cannot be read (its name, the value,
// and what is accepted).
var ErrQuery = errors.New("view: bad query")

// ParseQuery reads a Query from URL parameters: task and exit (repeated or
// comma-separated), min_reward, max_reward, drift and branch (true or
// false), text, sort, desc, offset, limit. An unknown parameter is refused
// by name.
func ParseQuery(v url.Values) (Query, error) {
	var q Query
	known := []string{"task", "exit", "min_reward", "max_reward", "drift", "branch", "text", "sort", "desc", "offset", "limit"}
	for k := range v {
		if !slices.Contains(known, k) {
			return q, fmt.Errorf("%w: unknown parameter %q (known: %s)", ErrQuery, k, strings.Join(known, ", "))
		}
	}
	list := func(k string) []string {
		var out []string
		for _, s := range v[k] {
			for p := range strings.SplitSeq(s, ",") {
				if p != "" {
					out = append(out, p)
				}
			}
		}
		return out
	}
	q.Tasks, q.Exits, q.Text = list("task"), list("exit"), v.Get("text")
	for _, f := range []struct {
		name string
		dst  **float64
	}{{"min_reward", &q.MinReward}, {"max_reward", &q.MaxReward}} {
		if s := v.Get(f.name); s != "" {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(x) {
				return q, fmt.Errorf("%w: %s=%q: want a number", ErrQuery, f.name, s)
			}
			*f.dst = &x
		}
	}
	for _, f := range []struct {
		name string
		dst  **bool
	}{{"drift", &q.Drift}, {"branch", &q.Branch}} {
		if s := v.Get(f.name); s != "" {
			b, err := strconv.ParseBool(s)
			if err != nil {
				return q, fmt.Errorf("%w: %s=%q: want true or false", ErrQuery, f.name, s)
			}
			*f.dst = &b
		}
	}
	if s := v.Get("desc"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return q, fmt.Errorf("%w: desc=%q: want true or false", ErrQuery, s)
		}
		q.Desc = b
	}
	q.Sort = v.Get("sort")
	for _, f := range []struct {
		name string
		dst  *int
	}{{"offset", &q.Offset}, {"limit", &q.Limit}} {
		if s := v.Get(f.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return q, fmt.Errorf("%w: %s=%q: want a whole number", ErrQuery, f.name, s)
			}
			*f.dst = n
		}
	}
	return q, q.check()
}

func (q *Query) check() error {
	if q.Sort == "" {
		q.Sort = "episode_id"
	}
	if !slices.Contains(SortKeys, q.Sort) {
		return fmt.Errorf("%w: sort=%q: unknown column (known: %s)", ErrQuery, q.Sort, strings.Join(SortKeys, ", "))
	}
	if q.Limit == 0 {
		q.Limit = DefaultLimit
	}
	if q.Limit < 1 || q.Limit > MaxLimit {
		return fmt.Errorf("%w: limit=%d: want 1 to %d", ErrQuery, q.Limit, MaxLimit)
	}
	if q.Offset < 0 || q.Offset+q.Limit > MaxWindow {
		return fmt.Errorf("%w: offset=%d: offset+limit may be at most %d (sort the other way to see the end of a long list)", ErrQuery, q.Offset, MaxWindow)
	}
	return nil
}

// episodeCols and the others are the projections the list reads: only
// these columns are decoded (never the token lists, screenshots or trees).
type episodeCols struct {
	EpisodeID       string  `parquet:"episode_id"`
	TaskID          string  `parquet:"task_id"`
	Repeat          int32   `parquet:"repeat"`
	ExitReason      string  `parquet:"exit_reason"`
	Steps           int32   `parquet:"steps"`
	DurationMS      float64 `parquet:"duration_ms"`
	ResetMS         float64 `parquet:"reset_ms"`
	TokenDrift      bool    `parquet:"token_drift"`
	TokenTurns      int32   `parquet:"token_turns"`
	ParentEpisodeID *string `parquet:"parent_episode_id,optional"`
	BranchStep      *int32  `parquet:"branch_step,optional"`
}

type rewardCols struct {
	EpisodeID string   `parquet:"episode_id"`
	StepIndex *int32   `parquet:"step_index,optional"`
	Name      string   `parquet:"name"`
	Value     *float64 `parquet:"value,optional"`
}

type textCols struct {
	EpisodeID  string  `parquet:"episode_id"`
	ActionJSON string  `parquet:"action_json"`
	Output     string  `parquet:"output"`
	ModelText  *string `parquet:"model_text,optional"`
}

// cursor is a row stream with one row of look-ahead, for the merge join of
// the rewards and steps tables onto the episodes: within a generation their
// rows follow the episodes' order (formats/shard's invariant), and every
// table is read in generation order.
type cursor[T any] struct {
	next func() (T, error, bool)
	stop func()
	cur  T
	ok   bool
	err  error
}

func newCursor[T any](seq iter.Seq2[T, error]) *cursor[T] {
	c := &cursor[T]{}
	c.next, c.stop = iter.Pull2(seq)
	c.advance()
	return c
}

func (c *cursor[T]) advance() {
	row, err, ok := c.next()
	switch {
	case !ok:
		c.ok = false
	case err != nil:
		c.ok, c.err = false, err
	default:
		c.cur, c.ok = row, true
	}
}

// Episodes runs q over the dataset ds, reward naming the episode-level
// reward rows carry. It streams the episodes and rewards tables (and the
// steps table's action, output and model text columns when q.Text is set)
// once, keeping at most 2×(Offset+Limit) rows.
func Episodes(ctx context.Context, ds *shard.Dataset, reward string, q Query) (*Page, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	rewards := newCursor(shard.Project[rewardCols](ds, schemas.TableRewards))
	defer rewards.stop()
	var steps *cursor[textCols]
	text := strings.ToLower(q.Text)
	if text != "" {
		steps = newCursor(shard.Project[textCols](ds, schemas.TableSteps))
		defer steps.stop()
	}
	window := q.Offset + q.Limit
	less := rowLess(q.Sort, q.Desc)
	page := &Page{Reward: reward, Offset: q.Offset, Limit: q.Limit, Episodes: []Row{}}
	var kept []Row
	for ep, err := range shard.Project[episodeCols](ds, schemas.TableEpisodes) {
		if err != nil {
			return nil, err
		}
		if page.Scanned++; page.Scanned%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		row := Row{EpisodeID: ep.EpisodeID, TaskID: ep.TaskID, Repeat: ep.Repeat, ExitReason: ep.ExitReason, Steps: ep.Steps,
			DurationMS: ep.DurationMS, ResetMS: ep.ResetMS, TokenDrift: ep.TokenDrift, TokenTurns: ep.TokenTurns, BranchStep: ep.BranchStep}
		if ep.ParentEpisodeID != nil {
			row.Parent = *ep.ParentEpisodeID
		}
		for rewards.ok && rewards.cur.EpisodeID == ep.EpisodeID {
			r := rewards.cur
			if r.StepIndex == nil && r.Name == reward && row.Reward == nil && r.Value != nil {
				v := *r.Value
				row.Reward = &v
			}
			rewards.advance()
		}
		if rewards.err != nil {
			return nil, rewards.err
		}
		found := false
		if steps != nil {
			for steps.ok && steps.cur.EpisodeID == ep.EpisodeID {
				s := &steps.cur
				if !found && (containsFold(s.ActionJSON, text) || containsFold(s.Output, text) || (s.ModelText != nil && containsFold(*s.ModelText, text))) {
					found = true
				}
				steps.advance()
			}
			if steps.err != nil {
				return nil, steps.err
			}
		}
		if !q.match(&row) || (steps != nil && !found) {
			continue
		}
		page.Matched++
		kept = append(kept, row)
		if len(kept) >= 2*window {
			slices.SortFunc(kept, less)
			kept = kept[:window]
		}
	}
	if rewards.ok {
		return nil, fmt.Errorf("%w: %s: reward rows of episode %q do not follow the episodes' order", shard.ErrCorrupt, ds.Dir(), rewards.cur.EpisodeID)
	}
	if steps != nil && steps.ok {
		return nil, fmt.Errorf("%w: %s: step rows of episode %q do not follow the episodes' order", shard.ErrCorrupt, ds.Dir(), steps.cur.EpisodeID)
	}
	slices.SortFunc(kept, less)
	if q.Offset < len(kept) {
		page.Episodes = append(page.Episodes, kept[q.Offset:min(len(kept), window)]...)
	}
	return page, nil
}

// containsFold reports whether s holds lowerSub (already lower case),
// ignoring case.
func containsFold(s, lowerSub string) bool {
	if len(s) < len(lowerSub) {
		return false
	}
	return strings.Contains(strings.ToLower(s), lowerSub)
}

func (q *Query) match(r *Row) bool {
	if len(q.Tasks) > 0 && !slices.Contains(q.Tasks, r.TaskID) {
		return false
	}
	if len(q.Exits) > 0 && !slices.Contains(q.Exits, r.ExitReason) {
		return false
	}
	if q.MinReward != nil && (r.Reward == nil || *r.Reward < *q.MinReward) {
		return false
	}
	if q.MaxReward != nil && (r.Reward == nil || *r.Reward > *q.MaxReward) {
		return false
	}
	if q.Drift != nil && r.TokenDrift != *q.Drift {
		return false
	}
	if q.Branch != nil && (r.Parent != "") != *q.Branch {
		return false
	}
	return true
}

// rowLess orders rows by key (descending when desc), a missing reward
// last either way, ties by episode id ascending.
func rowLess(key string, desc bool) func(a, b Row) int {
	sign := 1
	if desc {
		sign = -1
	}
	cmpKey := func(a, b Row) int {
		switch key {
		case "task_id":
			return strings.Compare(a.TaskID, b.TaskID)
		case "exit_reason":
			return strings.Compare(a.ExitReason, b.ExitReason)
		case "steps":
			return int(a.Steps) - int(b.Steps)
		case "duration_ms":
			return cmpFloat(a.DurationMS, b.DurationMS)
		case "reset_ms":
			return cmpFloat(a.ResetMS, b.ResetMS)
		case "repeat":
			return int(a.Repeat) - int(b.Repeat)
		case "reward":
			return cmpFloat(*a.Reward, *b.Reward)
		}
		return strings.Compare(a.EpisodeID, b.EpisodeID)
	}
	return func(a, b Row) int {
		if key == "reward" && (a.Reward == nil || b.Reward == nil) {
			switch {
			case a.Reward == nil && b.Reward != nil:
				return 1
			case a.Reward != nil && b.Reward == nil:
				return -1
			}
		} else if c := cmpKey(a, b); c != 0 {
			return sign * c
		}
		return strings.Compare(a.EpisodeID, b.EpisodeID)
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
