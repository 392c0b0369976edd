// Package replay re-runs stored episodes and reports where they diverge: it
// rebuilds each task's golden state from the specs recorded in a dataset's
// manifest (on the same or another provider), forks replicas through the
// pool, re-executes every episode's recorded canonical actions in order, and
// compares each new observation and the final reward with the recorded ones.
//
// It reads datasets (formats/shard) and runs episodes through package
// episode (the same runner the collector uses) over the pool; with
// Config.Record it writes the replay as a new dataset. It does not know
// plans, resumes or any trainer format, and does not import the collector.
package replay

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"

	"github.com/forkline/forkline/observe"
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
	// applies the masks (by default dates and times, sandbox paths and
	// long hex ids: DefaultMasks) before comparing.
	Normalized Mode = "normalized"
	// Hash compares sha256 digests only (the report shows digests, not text).
	Hash Mode = "hash"
)

// DefaultMasks are applied in Normalized mode, in order. Each replaces what
// legitimately differs between two runs of the same environment: dates and
// times first — the ISO forms, then the ones ls, date and their kin print
// (month-day, weekday, clock time, a year where ls puts one instead of the
// time) — since a replay writes every file again and runs at another
// time, so a model's `ls -la` or `date` could never match; then sandbox
// paths and long hex ids. Sizes, permissions, counts and names still
// count. -mask adds more; -mask none drops these.
var DefaultMasks = []Mask{
	{Name: "iso-timestamp", Pattern: regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?( ?(Z|[+-]\d{2}:?\d{2}))?`), Replace: "<TIME>"},
	{Name: "iso-date", Pattern: regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}\b`), Replace: "<DATE>"},
	{Name: "month-day", Pattern: regexp.MustCompile(`\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2}( +(\d{1,2}:\d{2}(:\d{2})?|\d{4}))?\b`), Replace: "<DATE>"},
	{Name: "weekday", Pattern: regexp.MustCompile(`\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b`), Replace: "<DAY>"},
	{Name: "clock-time", Pattern: regexp.MustCompile(`\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b`), Replace: "<TIME>"},
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

// Config configures a replay. forkline replay fills it from flags,
// starting from DefaultConfig; a zero field means what its comment says
// (Validate reports a value that cannot run).
type Config struct {
	In             string // the dataset to replay
	Provider       string // default: the provider the dataset was collected with; the program registers it (import providers/all)
	ProviderParams map[string]string
	Image          string // override every task's image (docker)
	// TaskFiles, when set, replaces the recorded specs with the specs of the
	// same ids read from these files (a changed setup, a new version of a
	// task): the replay then shows what the change does to stored episodes.
	TaskFiles  string
	Tasks      []string // only these task ids (empty: all)
	EpisodeIDs []string // only these episode ids or id prefixes (empty: all)
	Mode       Mode     // "" is Exact
	Masks      []Mask   // Normalized mode; nil means DefaultMasks
	// Replicas is the episodes replayed in parallel; 0 is DefaultReplicas
	// (4), as on the command line. A negative count is refused (it used
	// to be replaced by 4).
	Replicas int
	WorkDir  string
	// Logger receives the replay's records (each with run_id, the
	// replay's own, and replayed_run_id); when nil, nothing is logged.
	Logger *slog.Logger
	// Observer, when set, is told of the replay as it goes (package
	// observe): metrics and progress are observers.
	Observer observe.Observer
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
