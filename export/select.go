package export

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/schemas"
)

// Where is one column filter: an episode column equal to one of Values,
// or with Not, equal to none of them.
type Where struct {
	Column string // one of WhereColumns
	Not    bool
	Values []string
}

// whereColumns are the episode columns a Where can test.
var whereColumns = map[string]func(e *schemas.EpisodeRow) string{
	"episode_id":     func(e *schemas.EpisodeRow) string { return e.EpisodeID },
	"run_id":         func(e *schemas.EpisodeRow) string { return e.RunID },
	"task_id":        func(e *schemas.EpisodeRow) string { return e.TaskID },
	"task_hash":      func(e *schemas.EpisodeRow) string { return e.TaskHash },
	"provider":       func(e *schemas.EpisodeRow) string { return e.Provider },
	"golden_id":      func(e *schemas.EpisodeRow) string { return e.GoldenID },
	"reset_strategy": func(e *schemas.EpisodeRow) string { return e.ResetStrategy },
	"reset_origin":   func(e *schemas.EpisodeRow) string { return e.ResetOrigin },
	"exit_reason":    func(e *schemas.EpisodeRow) string { return e.ExitReason },
	// branched: the episode is a branch (it has a parent episode).
	"branched":    func(e *schemas.EpisodeRow) string { _, _, ok := e.Branched(); return strconv.FormatBool(ok) },
	"token_drift": func(e *schemas.EpisodeRow) string { return strconv.FormatBool(e.TokenDrift) },
	"has_tokens":  func(e *schemas.EpisodeRow) string { return strconv.FormatBool(len(e.ResponseIDs) > 0) },
	// has_logprobs: the episode's token record carries logprobs (verl-agent
	// cannot batch rows with and without them).
	"has_logprobs": func(e *schemas.EpisodeRow) string { return strconv.FormatBool(len(e.ResponseLogprobs) > 0) },
}

// WhereColumns returns the episode columns a Where can test, sorted.
func WhereColumns() []string {
	var n []string
	for k := range whereColumns {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// ParseWhere reads "column=v1,v2" or "column!=v1,v2".
func ParseWhere(s string) (Where, error) {
	col, vals, ok := strings.Cut(s, "=")
	w := Where{}
	if !ok || col == "" {
		return w, fielderr.Errorf("export", "Where", fmt.Sprintf("%q", s), "want column=value[,value...] or column!=value[,value...]")
	}
	if c, found := strings.CutSuffix(col, "!"); found {
		col, w.Not = c, true
	}
	w.Column, w.Values = col, strings.Split(vals, ",")
	if err := w.check(); err != nil {
		return Where{}, fielderr.New("export", "Where", fmt.Sprintf("%q", s), err)
	}
	return w, nil
}

func (w Where) check() error {
	if _, ok := whereColumns[w.Column]; !ok {
		return fmt.Errorf("unknown column %q (known: %s)", w.Column, strings.Join(WhereColumns(), ", "))
	}
	return nil
}

func (w Where) match(e *schemas.EpisodeRow) bool {
	return slices.Contains(w.Values, whereColumns[w.Column](e)) != w.Not
}

// String is w as ParseWhere reads it.
func (w Where) String() string {
	op := "="
	if w.Not {
		op = "!="
	}
	return w.Column + op + strings.Join(w.Values, ",")
}

// Filter is the episode selection export applies (-task, -episode, -where,
// -min-reward, -max-reward), as a value of its own so that every reader of datasets
// selects the same episodes: inspect -list and forkline view use it as
// export does. An episode passes when every part holds; the zero Filter
// passes every episode.
type Filter struct {
	Where     []Where  // column filters (ParseWhere)
	MinReward *float64 // the reward is at least this; a null reward never is
	MaxReward *float64 // the reward is at most this; a null reward never is
	Tasks     []string // the episode's task is one of these; any task when empty
	Episodes  []string // the episode's id starts with one of these prefixes; any episode when empty
	Reward    string   // the episode-level reward MinReward tests; DefaultReward when empty
}

// Filter is o's selection.
func (o Options) Filter() Filter {
	return Filter{Where: o.Where, MinReward: o.MinReward, MaxReward: o.MaxReward, Tasks: o.Tasks, Episodes: o.Episodes, Reward: o.Reward}
}

// Match reports whether the episode row with its rewards (any order; the
// step-level ones are ignored) passes every part of f. It reads no steps,
// so a reader can select from the episodes and rewards tables alone.
func (f Filter) Match(row *schemas.EpisodeRow, rewards []schemas.RewardRow) bool {
	if len(f.Tasks) > 0 && !slices.Contains(f.Tasks, row.TaskID) {
		return false
	}
	if len(f.Episodes) > 0 && !slices.ContainsFunc(f.Episodes, func(p string) bool { return strings.HasPrefix(row.EpisodeID, p) }) {
		return false
	}
	for _, w := range f.Where {
		if !w.match(row) {
			return false
		}
	}
	if f.MinReward != nil || f.MaxReward != nil {
		r := f.EpisodeReward(rewards)
		if r == nil || (f.MinReward != nil && *r < *f.MinReward) || (f.MaxReward != nil && *r > *f.MaxReward) {
			return false
		}
	}
	return true
}

// EpisodeReward is the value of the episode-level reward row named
// f.Reward (DefaultReward when empty) among rewards, or nil.
func (f Filter) EpisodeReward(rewards []schemas.RewardRow) *float64 {
	name := f.Reward
	if name == "" {
		name = DefaultReward
	}
	ep := model.Episode{Rewards: rewards, RewardName: name}
	return ep.Reward()
}

// selected applies o's Filter.
func selected(o Options, ep *model.Episode) bool {
	return o.Filter().Match(&ep.Row, ep.Rewards)
}

// SplitPart is one named share of a split.
type SplitPart struct {
	Name     string  // letters, digits and _
	Fraction float64 // positive; the parts of a split sum to 1
}

var splitName = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// ParseSplit reads "train=0.95,test=0.05": names made of letters, digits
// and underscores, positive fractions summing to 1.
func ParseSplit(s string) ([]SplitPart, error) {
	var parts []SplitPart
	for _, item := range strings.Split(s, ",") {
		name, frac, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || !splitName.MatchString(name) {
			return nil, fielderr.Errorf("export", "Split", fmt.Sprintf("%q", s), "want name=fraction[,name=fraction...], names of letters, digits and _")
		}
		f, err := strconv.ParseFloat(frac, 64)
		if err != nil {
			return nil, fielderr.Errorf("export", "Split", fmt.Sprintf("%q", s), "fraction of %s must be a positive number", name)
		}
		p := SplitPart{name, f}
		if err := checkPart(s, parts, p); err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	if err := checkSum(s, parts); err != nil {
		return nil, err
	}
	return parts, nil
}

// checkSplit applies ParseSplit's rules to parts built in code.
func checkSplit(parts []SplitPart) error {
	s := splitText(parts)
	if len(parts) == 0 {
		return fielderr.Errorf("export", "Split", fmt.Sprintf("%q", s), "want name=fraction[,name=fraction...], names of letters, digits and _")
	}
	for i, p := range parts {
		if err := checkPart(s, parts[:i], p); err != nil {
			return err
		}
	}
	return checkSum(s, parts)
}

// checkPart checks p, to follow before in the split s.
func checkPart(s string, before []SplitPart, p SplitPart) error {
	if !splitName.MatchString(p.Name) {
		return fielderr.Errorf("export", "Split", fmt.Sprintf("%q", s), "want name=fraction[,name=fraction...], names of letters, digits and _")
	}
	if !(p.Fraction > 0) || math.IsInf(p.Fraction, 0) {
		return fielderr.Errorf("export", "Split", fmt.Sprintf("%q", s), "fraction of %s must be a positive number", p.Name)
	}
	if slices.ContainsFunc(before, func(q SplitPart) bool { return q.Name == p.Name }) {
		return fielderr.Errorf("export", "Split", fmt.Sprintf("%q", s), "split %s named twice", p.Name)
	}
	return nil
}

func checkSum(s string, parts []SplitPart) error {
	sum := 0.0
	for _, p := range parts {
		sum += p.Fraction
	}
	if math.Abs(sum-1) > 1e-9 {
		return fielderr.Errorf("export", "Split", fmt.Sprintf("%q", s), "fractions sum to %g, not 1", sum)
	}
	return nil
}

// splitText is parts as ParseSplit reads them.
func splitText(parts []SplitPart) string {
	var s []string
	for _, p := range parts {
		s = append(s, p.Name+"="+strconv.FormatFloat(p.Fraction, 'g', -1, 64))
	}
	return strings.Join(s, ",")
}

func splitNames(parts []SplitPart) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.Name
	}
	return out
}

// assignSplit places an episode by the hash of its id: the first 8 bytes
// of sha256(episode_id) as a fraction of 2^64, against the parts'
// cumulative fractions in order. The same id always lands in the same
// split, whatever else is exported with it.
func assignSplit(parts []SplitPart, episodeID string) string {
	h := sha256.Sum256([]byte(episodeID))
	x := float64(binary.BigEndian.Uint64(h[:8])>>11) / (1 << 53) // [0, 1), exact in float64
	acc := 0.0
	for _, p := range parts {
		acc += p.Fraction
		if x < acc {
			return p.Name
		}
	}
	return parts[len(parts)-1].Name
}
