package manifest

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/forkline/forkline/formats/shard"
)

// Summary is the manifest's "summary" entry: what the command that last
// wrote the dataset reports of its run. Which part is set says which
// command: collect's report sits at the top level (Collect, as collect has
// always written it), replay -record's and merge's too under their own
// keys, serve's under "serve".
type Summary struct {
	*Collect
	*Replay
	*Merge
	Serve *Serve `json:"serve,omitempty"`
}

// Encode is the entry's JSON. It fails only on a value JSON cannot hold
// (a NaN rate).
func (s Summary) Encode() (json.RawMessage, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("manifest: summary: %w", err)
	}
	return b, nil
}

// DecodeSummary reads a manifest's summary entry.
func DecodeSummary(raw json.RawMessage) (Summary, error) {
	var s Summary
	if err := json.Unmarshal(raw, &s); err != nil {
		return Summary{}, fmt.Errorf("manifest: summary: %w", err)
	}
	return s, nil
}

// Collect is collect's report of a run (written into the manifest, and
// printed by the command through internal/ui). Fields marked "this invocation" measure only what the last invocation did; the
// others cover the whole dataset.
type Collect struct {
	RunID       string         `json:"run_id,omitempty"`
	Status      string         `json:"status,omitempty"`
	NothingToDo bool           `json:"nothing_to_do,omitempty"`
	Planned     int            `json:"planned"`
	Episodes    int            `json:"episodes"`             // kept in the dataset
	Skipped     int            `json:"skipped_already_kept"` // kept before this invocation
	Ran         int            `json:"ran"`                  // this invocation: episodes committed
	NotRun      int            `json:"not_run_unavailable"`  // this invocation: ended by an unavailable service, not kept
	Steps       int64          `json:"steps"`
	RanSteps    int64          `json:"ran_steps"` // this invocation
	ByExit      map[string]int `json:"by_exit_reason"`
	Losses      int            `json:"scaffold_losses"`
	// Errors are the scaffold losses grouped by identical detail, most
	// frequent first; OtherErrors counts losses whose detail did not fit.
	Errors         []ErrorCount       `json:"errors"`
	OtherErrors    int                `json:"errors_other,omitempty"`
	Unavailable    []ErrorCount       `json:"unavailable,omitempty"` // this invocation: why NotRun episodes were not kept
	RewardMean     *float64           `json:"reward_mean"`
	Rewarded       int                `json:"rewarded"`
	RewardsMissing int                `json:"rewards_missing"`
	ResetMS        map[string]Latency `json:"reset_ms"`
	GoldenBuildMS  map[string]float64 `json:"golden_build_ms"`
	StepsPerSec    float64            `json:"steps_per_s"`    // this invocation
	EpisodesPerSec float64            `json:"episodes_per_s"` // this invocation
	WallSec        float64            `json:"wall_s"`         // this invocation
	Screenshots    int64              `json:"screenshots"`    // this invocation
	BlobsStored    int64              `json:"blobs_stored"`   // this invocation
	DedupRatio     float64            `json:"dedup_ratio"`    // screenshots per blob stored (pixels hash); 0 when none was
	BytesPerStep   float64            `json:"bytes_per_step"` // this invocation: the shards it closed (steps, episodes, rewards, blobs), bytes on disk per step
	// RowBytesPerStep is every row this invocation committed, uncompressed,
	// as the shard writer estimates it to roll generations, per step.
	RowBytesPerStep float64 `json:"row_bytes_per_step"`
	TokenDrift      int     `json:"episodes_with_token_drift"`
	Replacements    int     `json:"replicas_replaced"` // this invocation
}

// ErrorCount is how many episodes ended with one identical error.
type ErrorCount struct {
	Episodes   int    `json:"episodes"`
	ExitReason string `json:"exit_reason"`
	Detail     string `json:"detail"`
}

// String is the one-line form: "24 episodes: env_error: pool: ...".
func (e ErrorCount) String() string {
	n := "episodes"
	if e.Episodes == 1 {
		n = "episode"
	}
	return fmt.Sprintf("%d %s: %s: %s", e.Episodes, n, e.ExitReason, oneLine(e.Detail, 300))
}

// oneLine folds a detail (which may hold a command's output tail) onto one
// line of at most max bytes.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "(no detail)"
	}
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// Replay is replay -record's report: the dataset replayed and how its
// episodes compared.
type Replay struct {
	ReplayOf  string `json:"replay_of"`
	Identical int    `json:"identical"`
	Diverged  int    `json:"diverged"`
	Errored   int    `json:"errored"`
}

// Merge is merge's report: the parts merged and the parts of the plan no
// input covered.
type Merge struct {
	MergedFrom   []MergedPart `json:"merged_from"`
	MissingParts []int        `json:"missing_parts"`
}

// MergedPart is one input of a merge.
type MergedPart struct {
	Dir      string       `json:"dir"`
	RunID    string       `json:"run_id"`
	Part     Part         `json:"part"`
	Status   shard.Status `json:"status"`
	Episodes int          `json:"episodes"`
}
