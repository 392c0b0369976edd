package view

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/forkline/forkline/export"
)

// Query selects, sorts and pages a run's episodes: the episode list. Every
// filter set must hold (AND); a list filter holds when the episode's value
// is one of its values. The selection is export.Filter's (Filter): the
// episodes export -task/-where/-min-reward and inspect -list select for
// the same filters are the ones listed, Text aside (export reads no steps
// to select).
type Query struct {
	Tasks []string // task_id is one of these
	Exits []string // exit_reason is one of these
	// MinReward and MaxReward bound the episode-level reward (inclusive);
	// an episode without that reward is excluded when either is set.
	MinReward, MaxReward *float64
	Drift                *bool // token_drift is this
	Branch               *bool // the episode is a branch (has a parent) or not
	// Where are export's column filters (export.ParseWhere: column=v1,v2
	// or column!=v1,v2), and Episodes episode id prefixes (export
	// -episode).
	Where    []export.Where
	Episodes []string
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

// Paging bounds. The list is answered from the run's index (index.go);
// MaxWindow bounds how deep a page may start (a later page of a long
// sorted list is reached by sorting the other way).
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

// ParseQuery reads a Query from URL parameters: task, exit and episode
// (repeated or comma-separated), where (repeated: export -where's
// column=v1,v2 or column!=v1,v2), min_reward, max_reward, drift and branch
// (true or false), text, sort, desc, offset, limit. An unknown parameter
// is refused by name.
func ParseQuery(v url.Values) (Query, error) {
	var q Query
	known := []string{"task", "exit", "episode", "where", "min_reward", "max_reward", "drift", "branch", "text", "sort", "desc", "offset", "limit"}
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
	q.Tasks, q.Exits, q.Episodes, q.Text = list("task"), list("exit"), list("episode"), v.Get("text")
	for _, w := range v["where"] {
		pw, err := export.ParseWhere(w)
		if err != nil {
			return q, fmt.Errorf("%w: where=%q: %v", ErrQuery, w, err)
		}
		q.Where = append(q.Where, pw)
	}
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

// unindexed are the export.Where columns the list's index does not hold
// (they are read from the token lists).
var unindexed = []string{"has_tokens", "has_logprobs"}

func (q *Query) check() error {
	for _, w := range q.Where {
		if slices.Contains(unindexed, w.Column) {
			return fmt.Errorf("%w: where=%q: the episode list cannot filter on %s (export -where and inspect -list -where can)", ErrQuery, w.String(), w.Column)
		}
	}
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

// Filter is q's selection as export.Filter, reward naming the
// episode-level reward (MinReward and MaxReward test it): exit is
// -where exit_reason=..., drift -where token_drift=..., branch
// -where branched=....
func (q *Query) Filter(reward string) export.Filter {
	f := export.Filter{Where: slices.Clone(q.Where), MinReward: q.MinReward, MaxReward: q.MaxReward, Tasks: q.Tasks, Episodes: q.Episodes, Reward: reward}
	if len(q.Exits) > 0 {
		f.Where = append(f.Where, export.Where{Column: "exit_reason", Values: q.Exits})
	}
	if q.Drift != nil {
		f.Where = append(f.Where, export.Where{Column: "token_drift", Values: []string{strconv.FormatBool(*q.Drift)}})
	}
	if q.Branch != nil {
		f.Where = append(f.Where, export.Where{Column: "branched", Values: []string{strconv.FormatBool(*q.Branch)}})
	}
	return f
}

// rewardCols and textCols are the row reader's projections for a shard
// whose columns the column reader cannot read (an older layout).
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

// containsFoldBytes reports whether s holds lowerSub (already lower
// case), ignoring case as strings.ToLower does.
func containsFoldBytes(s, lowerSub []byte) bool {
	if len(s) < len(lowerSub) {
		return false
	}
	for _, c := range s {
		if c >= utf8.RuneSelf {
			return strings.Contains(strings.ToLower(string(s)), string(lowerSub))
		}
	}
	for _, c := range lowerSub {
		if c >= utf8.RuneSelf {
			return false // an ASCII s lowers to ASCII
		}
	}
	n := len(lowerSub)
	if n == 0 {
		return true
	}
	first := lowerSub[0]
	for i := 0; i+n <= len(s); i++ {
		if lower(s[i]) != first {
			continue
		}
		j := 1
		for j < n && lower(s[i+j]) == lowerSub[j] {
			j++
		}
		if j == n {
			return true
		}
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
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
