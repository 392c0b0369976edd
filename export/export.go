// Package export turns native forkline datasets into the formats trainers
// load. It owns everything between the datasets on disk and a finished
// output: checking the inputs (each opens, they share one schema version,
// episode ids are unique across them, their manifests hold the task specs
// and policy options the conversation is built from), the filters (-task,
// -episode, -where, -min-reward), the split by episode-id hash, joining the
// named episode reward, staging the output so that only a complete one appears at
// Out (and never over an input, or over anything export did not write: see
// output.go), and the registry of targets (Targets, Describe) that hands each
// selected episode, as an export/model Episode with the conversation its
// policy recorded (policy.Record), to a writer in formats/.
//
// It reads datasets only through formats/shard and their manifests; it must
// not know how a dataset was collected (providers, pools, policies at run
// time), what every target shares belongs to export/model, and the byte
// layout of each target to its formats/ package. Run streams one episode at a time and is deterministic: the same
// inputs and Options give the same bytes.
//
// Error messages name options by the command-line flags of forkline export
// (-in, -to, -out, ...), which is what a user of the tool sees.
package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/forkline/forkline/export/model"
	"github.com/forkline/forkline/formats/chat"
	"github.com/forkline/forkline/formats/hf"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// ErrBadInput is wrapped by every error caused by the input rather than by
// a failure while exporting: invalid Options, an unknown target, inputs
// that cannot be opened, are damaged (shard.ErrCorrupt: a shard that fails
// its sha256) or do not go together, an Out that may not be replaced or
// that would overwrite an input, and a selection that leaves nothing to
// write (every episode filtered out or refused by the target). forkline export
// maps it to exit code 2.
var ErrBadInput = errors.New("export: bad input")

// badInput keeps the message of err and adds ErrBadInput to its chain.
type badInput struct{ err error }

func (b badInput) Error() string   { return b.err.Error() }
func (b badInput) Unwrap() []error { return []error{b.err, ErrBadInput} }

func bad(format string, args ...any) error { return badInput{fmt.Errorf(format, args...)} }

// DefaultReward is the reward joined when Options.Reward is empty: the one
// the task's verifier gives.
const DefaultReward = "verify"

// Options is one export. The zero value of an optional field is its
// default.
type Options struct {
	Inputs []string // native dataset directories (required)
	Target string   // a name from Targets (required)
	// Out is the output directory, or for a file target (Describe(..).File)
	// a file or "-" for Stdout (required). It must not be, contain or lie
	// inside an input. An existing Out must be an empty directory (for a
	// directory target) unless Force.
	Out string
	// Force replaces an existing Out that an earlier export wrote and that
	// is unchanged since; anything else at Out is refused even with Force.
	Force  bool
	Stdout io.Writer // where a file target writes when Out is "-"; os.Stdout when nil

	// Selection: an episode is exported when every filter holds.
	Where     []Where  // column filters (ParseWhere)
	MinReward *float64 // the reward is at least this; a null reward never is
	Tasks     []string // the episode's task is one of these; any task when empty
	Episodes  []string // the episode's id starts with one of these prefixes; any episode when empty
	Reward    string   // the episode-level reward row joined; DefaultReward when empty

	// Split assigns episodes to named splits by episode-id hash
	// (ParseSplit); every episode goes to "train" when nil.
	Split []SplitPart

	Rows     hf.RowsPer    // hf, hf-disk only: one row per episode (default) or step
	ToolArgs chat.ToolArgs // chat-jsonl only: tool-call arguments as a string (default) or object
}

// Validate reports the first problem with o that Run would refuse before
// reading any input. Its errors wrap ErrBadInput.
func (o Options) Validate() error {
	_, err := o.validate()
	return err
}

func (o Options) validate() (targetSpec, error) {
	if len(o.Inputs) == 0 || o.Out == "" || o.Target == "" {
		return targetSpec{}, bad("export: -in, -to and -out are required")
	}
	spec, err := lookup(o.Target)
	if err != nil {
		return targetSpec{}, err
	}
	if o.Rows != "" && !spec.rows {
		return targetSpec{}, bad("export: -rows is for %s, not %s", targetsWith(func(s targetSpec) bool { return s.rows }), o.Target)
	}
	if o.ToolArgs != "" && !spec.toolArgs {
		return targetSpec{}, bad("export: -tool-args is for %s, not %s", targetsWith(func(s targetSpec) bool { return s.toolArgs }), o.Target)
	}
	if o.Rows != "" {
		if _, err := hf.ParseRows(string(o.Rows)); err != nil {
			return targetSpec{}, badInput{fmt.Errorf("export: %w", err)}
		}
	}
	if o.ToolArgs != "" {
		if _, err := chat.ParseToolArgs(string(o.ToolArgs)); err != nil {
			return targetSpec{}, badInput{fmt.Errorf("export: %w", err)}
		}
	}
	for _, w := range o.Where {
		if err := w.check(); err != nil {
			return targetSpec{}, badInput{fmt.Errorf("export: -where %q: %w", w.String(), err)}
		}
	}
	if o.Split != nil {
		if err := checkSplit(o.Split); err != nil {
			return targetSpec{}, badInput{fmt.Errorf("export: %w", err)}
		}
	}
	if spec.file && len(o.Split) > 1 {
		return targetSpec{}, bad("export: -to %s writes one file; -split needs a directory target (chat-jsonl, hf, ...)", o.Target)
	}
	if !spec.file && o.Out == "-" {
		return targetSpec{}, bad("export: -to %s writes a directory; -out - is for jsonl only", o.Target)
	}
	return spec, nil
}

// withDefaults fills the optional fields Validate left empty.
func (o Options) withDefaults() Options {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Reward == "" {
		o.Reward = DefaultReward
	}
	if o.Split == nil {
		o.Split = []SplitPart{{Name: "train", Fraction: 1}}
	}
	if o.Rows == "" {
		o.Rows = hf.RowsEpisode
	}
	if o.ToolArgs == "" {
		o.ToolArgs = chat.ArgsString
	}
	return o
}

// Report is what an export did. Its JSON form is what forkline export -json
// prints.
type Report struct {
	Inputs   []InputReport    `json:"inputs"`
	Read     int64            `json:"episodes_read"`
	Filtered int64            `json:"filtered_out"`
	Written  map[string]int64 `json:"written"` // per split, every split named
	Refused  map[string]int64 `json:"refused"` // per reason the target gave
}

// InputReport is what an export did with one input.
type InputReport struct {
	Path     string `json:"path"`
	RunID    string `json:"run_id"`
	Status   string `json:"status"`
	Read     int64  `json:"episodes_read"`
	Selected int64  `json:"selected"`
}

// RefusedText lists the refusals by reason, sorted: "2 no token record, 1
// ...".
func (r *Report) RefusedText() string {
	var reasons []string
	for k := range r.Refused {
		reasons = append(reasons, k)
	}
	slices.Sort(reasons)
	var parts []string
	for _, k := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s", r.Refused[k], k))
	}
	return strings.Join(parts, ", ")
}

// Run exports o.Inputs to o.Target at o.Out. The output appears at Out only
// complete: a failed, refused or cancelled export leaves nothing there (a
// file target streamed to Stdout excepted). Run stops when ctx is cancelled
// and returns ctx's error.
//
// The Report is nil when Run failed before reading any episode (invalid
// Options, an Out that may not be replaced, inputs that do not go
// together); otherwise it says what was read, filtered, refused and
// written, also when Run failed.
func Run(ctx context.Context, o Options) (*Report, error) {
	spec, err := o.validate()
	if err != nil {
		return nil, err
	}
	o = o.withDefaults()
	if err := checkOut(o, !spec.file); err != nil {
		return nil, err
	}
	inputs, err := openInputs(o, !spec.file)
	if err != nil {
		return nil, err
	}
	if err := checkUniqueIDs(ctx, inputs); err != nil {
		return nil, err
	}
	oc := &openContext{o: &o, splits: splitNames(o.Split), provenance: provenance(o, inputs), allThinking: true}
	for _, in := range inputs {
		oc.allThinking = oc.allThinking && in.conversation.EnableThinking != nil
	}

	rep := &Report{Written: map[string]int64{}, Refused: map[string]int64{}}
	for _, s := range oc.splits {
		rep.Written[s] = 0
	}
	if spec.file {
		err = writeFileTarget(o, func(w io.Writer) error {
			oc.stream = w
			return runPipeline(ctx, o, spec, "", oc, inputs, rep)
		})
	} else {
		err = writeDirTarget(o, func(dir string) error {
			return runPipeline(ctx, o, spec, dir, oc, inputs, rep)
		})
	}
	for _, in := range inputs {
		rep.Inputs = append(rep.Inputs, InputReport{Path: in.path, RunID: in.m.RunID, Status: string(in.m.Status), Read: in.read, Selected: in.selected})
	}
	return rep, err
}

// runPipeline streams every input's episodes, one at a time, through the
// filters and the split into the target.
func runPipeline(ctx context.Context, o Options, spec targetSpec, dir string, oc *openContext, inputs []*input, rep *Report) error {
	s, err := spec.open(dir, oc)
	if err != nil {
		return err
	}
	for _, in := range inputs {
		// Trainer targets get trajectories: a branch episode with its
		// prefix (its full steps from step 0, and a token record that
		// already opens with the prefix's turns), the episodes that
		// branched left out as their branches carry them. The lossless
		// jsonl view gives the rows as stored.
		each := in.ds.EachTrajectory
		var groups map[string]int
		if spec.file {
			each = in.ds.EachEpisode
		} else if groups, err = groupSizes(ctx, in.ds); err != nil {
			s.Close()
			return corruptInput(in.path, err)
		}
		err = each(func(row schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			in.read++
			rep.Read++
			ep := &model.Episode{Row: row, Steps: steps, Rewards: rewards, RewardName: o.Reward, Conversation: in.conversation}
			if !selected(o, ep) {
				rep.Filtered++
				return nil
			}
			in.selected++
			ep.Group = groupKey(row)
			ep.GroupSize = groups[ep.Group]
			if row.BranchStep != nil {
				ep.PrefixSteps = int(*row.BranchStep)
			}
			ep.Split = assignSplit(o.Split, splitKey(row))
			if t, ok := in.tasks[row.TaskID]; ok {
				ep.Instruction = t.Instruction
				if t.Verify != nil {
					ep.VerifyCmd = t.Verify.Cmd
				}
			} else if !spec.file {
				return bad("export: -in %s: episode %s: task %q is not among the manifest's task specs", in.path, row.EpisodeID, row.TaskID)
			}
			if !in.noPixels {
				ep.Blob = in.ds.Blob
			}
			err := s.Write(ep)
			var ref *model.Refusal
			switch {
			case errors.As(err, &ref):
				rep.Refused[ref.Reason]++
				return nil
			case err != nil:
				return err
			}
			rep.Written[ep.Split]++
			return nil
		})
		if err != nil {
			s.Close()
			return corruptInput(in.path, err)
		}
	}
	if err := s.Close(); err != nil {
		return err
	}
	if spec.file {
		return nil // jsonl is a view of the run; an empty view is still one
	}
	return checkWritten(o, rep)
}

// corruptInput marks a damaged input (a shard that fails its sha256 or
// cannot be decoded) as bad input: retrying will not help, and nothing is
// written. Other errors pass unchanged.
func corruptInput(path string, err error) error {
	if errors.Is(err, shard.ErrCorrupt) && !errors.Is(err, ErrBadInput) {
		return badInput{fmt.Errorf("export: -in %s: %w", path, err)}
	}
	return err
}

// checkWritten refuses an export that wrote nothing: filters that match no
// episode, or a target that refused them all, are mistakes to report, not
// an empty dataset to hand to a trainer.
func checkWritten(o Options, rep *Report) error {
	var written, refused int64
	for _, n := range rep.Written {
		written += n
	}
	for _, n := range rep.Refused {
		refused += n
	}
	if written > 0 {
		return nil
	}
	if refused > 0 {
		return bad("export: -to %s refused every one of the %d selected episodes (%s); nothing written", o.Target, refused, rep.RefusedText())
	}
	return bad("export: no episode to write: %d read, %d filtered out; nothing written", rep.Read, rep.Filtered)
}

// splitKey is what an episode's split is drawn from: a branch's parent, so
// that the branches of one prefix (a GRPO group, the two sides of a
// preference pair) never straddle train and test; an episode's own id
// otherwise, as before branching existed.
func splitKey(row schemas.EpisodeRow) string {
	if row.ParentEpisodeID != nil {
		return *row.ParentEpisodeID
	}
	return row.EpisodeID
}

// groupKey is an episode's group: its group_id, or for a row written
// before lineage columns existed, its task spec (what collect's root group
// is derived from).
func groupKey(row schemas.EpisodeRow) string {
	if row.GroupID != nil {
		return *row.GroupID
	}
	return "task:" + row.TaskID + "/" + row.TaskHash
}

// groupSizes counts the trajectories of each group, from the episodes
// table alone.
func groupSizes(ctx context.Context, ds *shard.Dataset) (map[string]int, error) {
	tree, err := ds.Tree()
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for e, err := range ds.Episodes() {
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if n := tree[e.EpisodeID]; !n.Branched && n.Children == 0 {
			out[groupKey(e)]++
		}
	}
	return out, nil
}
