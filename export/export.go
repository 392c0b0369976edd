// Package export turns native forkline datasets into the formats trainers
// load. It owns everything between the datasets on disk and a finished
// output: checking the inputs (each opens, they share one schema version,
// episode ids are unique across them, their manifests hold the task specs
// and policy options the conversation is built from), the filters (-task,
// -episode, -where, -min-reward), the split by episode-id hash, joining the
// named episode reward, staging the output so that only a complete one appears at
// Out (and never over an input, or over anything export did not write: see
// output.go), and the registry of targets (Targets, Describe) that hands each
// selected episode, as an formats/model Episode with the conversation its
// policy recorded (manifest.Policy), to a writer in formats/.
//
// It reads datasets only through formats/shard and their manifests; it must
// not know how a dataset was collected (providers, pools, policies at run
// time), what every target shares belongs to formats/model, and the byte
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
	"github.com/forkline/forkline/policy"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/chat"
	"github.com/forkline/forkline/formats/hf"
	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/formats/verl"
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

// badField is bad input about one field of Options (fielderr: the command
// says it as its flag).
func badField(e *fielderr.Error) error { return badInput{e} }

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
	MaxReward *float64 // the reward is at most this; a null reward never is
	Tasks     []string // the episode's task is one of these; any task when empty
	Episodes  []string // the episode's id starts with one of these prefixes; any episode when empty
	Reward    string   // the episode-level reward row joined; DefaultReward when empty

	// Split assigns episodes to named splits by episode-id hash
	// (ParseSplit); every episode goes to "train" when nil.
	Split []SplitPart

	// Rows is what one row is: hf, hf-disk "episode" (default) or "step";
	// verl-agent and sft-tokens "episode" (default) or "turn".
	Rows string

	// The conversation targets (chat-jsonl, dpo, hf and hf-disk episode
	// rows, verl-sft): tool-call arguments (default object), the content of
	// a message with only tool calls (default empty), reasoning kept
	// (default shown).
	ToolArgs    model.ArgsEncoding
	CallContent model.CallContent
	Reasoning   model.Reasoning

	// verl-agent: what reward_score holds (default none: the reward), and
	// the longest prompt and response a row may have (0: no limit).
	Advantage         verl.Advantage
	MaxPromptTokens   int
	MaxResponseTokens int

	// dpo: which pairs of a group (default max) and the line format
	// (default trl).
	Pairs     Pairs
	DPOFormat chat.DPOFormat

	// hf, hf-disk, sft-tokens: the dataset card's license, task_categories
	// and language.
	License        string
	TaskCategories []string
	Languages      []string

	// Progress, when set, is called once before the first episode with
	// read 0 and the inputs' episodes in total, then after each episode
	// read, from the goroutine that runs the export (it must not block).
	Progress func(read, total int64)
}

// Pairs says which preference pairs a group gives (-pairs).
type Pairs string

// The choices.
const (
	// PairsMax is one pair per group: its best episode against its worst.
	PairsMax Pairs = "max"
	// PairsAll is every pair of the group's episodes whose rewards differ.
	PairsAll Pairs = "all"
)

// ParsePairs reads -pairs.
func ParsePairs(s string) (Pairs, error) {
	switch Pairs(s) {
	case PairsMax, PairsAll:
		return Pairs(s), nil
	}
	return "", fielderr.Sentence("", "Pairs", fmt.Sprintf("%q", s), "(known: max, all)")
}

// Validate reports the first problem with o that Run would refuse before
// reading any input. Its errors wrap ErrBadInput.
func (o Options) Validate() error {
	_, err := o.validate()
	return err
}

func (o Options) validate() (targetSpec, error) {
	if len(o.Inputs) == 0 || o.Out == "" || o.Target == "" {
		return targetSpec{}, badInput{fielderr.Errorf("export", "", "", "Inputs, Target and Out are required").Mentions("Inputs", "Target", "Out")}
	}
	spec, err := lookup(o.Target)
	if err != nil {
		return targetSpec{}, err
	}
	given := map[string]bool{
		"Rows": o.Rows != "", "ToolArgs": o.ToolArgs != "", "CallContent": o.CallContent != "", "Reasoning": o.Reasoning != "",
		"Advantage": o.Advantage != "", "MaxPromptTokens": o.MaxPromptTokens != 0, "MaxResponseTokens": o.MaxResponseTokens != 0,
		"Pairs": o.Pairs != "", "DPOFormat": o.DPOFormat != "",
		"License": o.License != "", "TaskCategories": len(o.TaskCategories) > 0, "Languages": len(o.Languages) > 0,
	}
	for _, field := range optionFields {
		if given[field] && !spec.takes(field) {
			return targetSpec{}, badInput{fielderr.Sentence("export", field, "", "is for %s, not %s", targetsWith(func(s targetSpec) bool { return s.takes(field) }), o.Target)}
		}
	}
	if o.Rows != "" && !slices.Contains(spec.rows, o.Rows) {
		return targetSpec{}, badInput{fielderr.Sentence("export", "Rows", fmt.Sprintf("%q", o.Rows), "for %s (known: %s)", o.Target, strings.Join(spec.rows, ", "))}
	}
	if o.Rows == string(hf.RowsStep) {
		// Step rows hold no conversation.
		for _, field := range conversationOptions {
			if given[field] {
				return targetSpec{}, badInput{fielderr.Sentence("export", field, "", "shapes the messages of episode rows; Rows step has none").Mentions("Rows")}
			}
		}
	}
	checks := []struct {
		given bool
		check func() error
	}{
		{o.ToolArgs != "", func() error { _, err := model.ParseArgs(string(o.ToolArgs)); return err }},
		{o.CallContent != "", func() error { _, err := model.ParseCallContent(string(o.CallContent)); return err }},
		{o.Reasoning != "", func() error { _, err := model.ParseReasoning(string(o.Reasoning)); return err }},
		{o.Advantage != "", func() error { _, err := verl.ParseAdvantage(string(o.Advantage)); return err }},
		{o.Pairs != "", func() error { _, err := ParsePairs(string(o.Pairs)); return err }},
		{o.DPOFormat != "", func() error { _, err := chat.ParseDPOFormat(string(o.DPOFormat)); return err }},
		{o.MaxPromptTokens < 0 || o.MaxResponseTokens < 0, func() error {
			return fielderr.Errorf("", "", "", "MaxPromptTokens and MaxResponseTokens must not be negative").Mentions("MaxPromptTokens", "MaxResponseTokens")
		}},
		{o.DPOFormat == chat.DPOOpenAI && o.ToolArgs == model.ArgsObject, func() error {
			return fielderr.Sentence("", "DPOFormat", "openai", "writes string arguments (OpenAI requires them); ToolArgs object does not apply").Mentions("ToolArgs")
		}},
	}
	for _, c := range checks {
		if c.given {
			if err := c.check(); err != nil {
				return targetSpec{}, badInput{fmt.Errorf("export: %w", err)}
			}
		}
	}
	if err := hf.CheckCardMeta(o.License, o.TaskCategories, o.Languages); err != nil {
		return targetSpec{}, badInput{fmt.Errorf("export: %w", err)}
	}
	for _, w := range o.Where {
		if err := w.check(); err != nil {
			return targetSpec{}, badInput{fielderr.New("export", "Where", fmt.Sprintf("%q", w.String()), err)}
		}
	}
	if o.Split != nil {
		if err := checkSplit(o.Split); err != nil {
			return targetSpec{}, badInput{fmt.Errorf("export: %w", err)}
		}
	}
	if spec.file && len(o.Split) > 1 {
		return targetSpec{}, badInput{fielderr.Sentence("export", "Target", o.Target, "writes one file; Split needs a directory target (chat-jsonl, hf, ...)").Mentions("Split")}
	}
	if !spec.file && o.Out == "-" {
		return targetSpec{}, badInput{fielderr.Sentence("export", "Target", o.Target, "writes a directory; Out - is for jsonl only").Mentions("Out")}
	}
	return spec, nil
}

// optionFields are the target options, by Options field, in usage order.
var optionFields = []string{"Rows", "ToolArgs", "CallContent", "Reasoning", "Advantage", "MaxPromptTokens", "MaxResponseTokens",
	"Pairs", "DPOFormat", "License", "TaskCategories", "Languages"}

// withDefaults fills the optional fields Validate left empty.
func (o Options) withDefaults(spec targetSpec) Options {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Reward == "" {
		o.Reward = DefaultReward
	}
	if o.Split == nil {
		o.Split = []SplitPart{{Name: "train", Fraction: 1}}
	}
	if o.Rows == "" && len(spec.rows) > 0 {
		o.Rows = spec.rows[0]
	}
	if o.Advantage == "" {
		o.Advantage = verl.AdvantageNone
	}
	if o.Pairs == "" {
		o.Pairs = PairsMax
	}
	if o.DPOFormat == "" {
		o.DPOFormat = chat.DPOTRL
	}
	return o
}

// conversation is the conversation options of o.
func (o Options) conversation() model.Options {
	return model.Options{Args: o.ToolArgs, CallContent: o.CallContent, Reasoning: o.Reasoning}.WithDefaults()
}

// Report is what an export did. Its JSON form is what forkline export -json
// prints.
type Report struct {
	Inputs   []InputReport `json:"inputs"`
	Read     int64         `json:"episodes_read"`
	Filtered int64         `json:"filtered_out"`
	// Written counts, per split (every split named, 0 for one that got
	// nothing and so has no file), what was written: episodes, or for dpo
	// preference pairs (Unit).
	Written map[string]int64 `json:"written"`
	Unit    string           `json:"unit"`    // "episodes" or "pairs"
	Refused map[string]int64 `json:"refused"` // per reason the target gave
	// Unsuccessful counts the written episodes that did not end in done or
	// whose reward is null or below 1 (SFT targets, which train on them
	// too, say so).
	Unsuccessful int64 `json:"unsuccessful"`
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
	o = o.withDefaults(spec)
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
	oc.toolVersions = map[string]string{}
	for _, in := range inputs {
		oc.toolVersions[in.m.RunID] = in.m.ToolVersion
		oc.allThinking = oc.allThinking && in.conversation.EnableThinking != nil
		oc.anyImages = oc.anyImages || in.conversation.Shows().Images()
	}

	if spec.groups {
		if oc.groups, err = collectGroups(ctx, o, inputs); err != nil {
			return nil, err
		}
	}

	rep := &Report{Written: map[string]int64{}, Refused: map[string]int64{}, Unit: "episodes"}
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
	progress := o.Progress
	if progress == nil {
		progress = func(int64, int64) {}
	}
	// Trainer targets get trajectories: a branch episode with its prefix
	// (its full steps from step 0, and a token record that already opens
	// with the prefix's turns), the episodes that branched left out as
	// their branches carry them. The lossless jsonl view gives the rows as
	// stored. The progress total counts what is read, so that it ends
	// at its total.
	// Only the roots of branch episodes are kept from each tree (an entry
	// per branch episode): a map with an entry per episode, held through
	// the export, was most of its memory at a million episodes.
	rootsOf := make([]map[string]string, len(inputs))
	var total int64
	for i, in := range inputs {
		f, err := in.ds.Forest()
		if err != nil {
			return corruptInput(in.path, err)
		}
		rootsOf[i] = f.Roots
		if spec.file {
			total += int64(f.Episodes)
		} else {
			total += int64(f.Trajectories)
		}
	}
	progress(0, total)
	for i, in := range inputs {
		roots := rootsOf[i]
		each := in.ds.EachTrajectory
		if spec.file {
			each = in.ds.EachEpisode
		}
		read := each
		if !spec.columnar {
			// A lines target works on this goroutine alone: the reading
			// goes to another. A columnar one already encodes on a
			// goroutine of its own; a third beside them on two cores
			// cost CPU and wall time (verl-sft of 1,000,000 episodes).
			read = func(fn episodeFunc) error { return readAhead(ctx, each, fn) }
		}
		err = read(func(row schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			in.read++
			rep.Read++
			progress(rep.Read, total)
			ep := &model.Episode{Row: row, Steps: steps, Rewards: rewards, RewardName: o.Reward, Conversation: in.conversation}
			if !selected(o, ep) {
				rep.Filtered++
				return nil
			}
			in.selected++
			ep.Split = assignSplit(o.Split, splitKey(row, roots))
			if err := in.describe(ep, !spec.file); err != nil {
				return err
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
			if r := ep.Reward(); row.ExitReason != "done" || r == nil || *r < 1 {
				rep.Unsuccessful++
			}
			return nil
		})
		if err != nil {
			s.Close()
			return corruptInput(in.path, err)
		}
	}
	if err := s.Close(); err != nil {
		if errors.Is(err, model.ErrSelection) {
			return badInput{err}
		}
		return err
	}
	if c, ok := s.(counter); ok {
		rep.Written, rep.Unit = c.Counts(), c.Unit()
		rep.Unsuccessful = 0
		for k, n := range c.Refusals() {
			rep.Refused[k] += n
		}
	}
	if spec.file {
		return nil // jsonl is a view of the run; an empty view is still one
	}
	return checkWritten(o, rep)
}

// episodeFunc is what a dataset's readers call with each episode.
type episodeFunc = func(schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) error

// The reader hands episodes over in batches of readAheadBatch, at most
// readAheadDepth batches ahead: enough to keep both busy, few hand-offs
// between the goroutines (one per episode cost more than it saved), and
// memory that of a few hundred episodes.
const (
	readAheadBatch = 32
	readAheadDepth = 4
)

// readAhead is each(fn) with the reading on a goroutine of its own: it
// decodes the next episodes (the shards' pages, the joins of branches)
// while fn builds and writes the ones before, so an export to a lines
// target uses a second core. fn is called on the caller's goroutine, in
// each's order. The slices each hands out are the episode's own (fresh
// per episode, shard.Dataset), so they may cross. The first error, fn's or
// the reader's, ends both and is returned.
func readAhead(ctx context.Context, each func(episodeFunc) error, fn episodeFunc) error {
	type item struct {
		row     schemas.EpisodeRow
		steps   []schemas.StepRow
		rewards []schemas.RewardRow
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan []item, readAheadDepth)
	// Written batches go back to the reader to be filled again, so a
	// batch's array is made readAheadDepth+2 times per export, not once per
	// readAheadBatch episodes.
	free := make(chan []item, readAheadDepth+2)
	var readErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		batch := make([]item, 0, readAheadBatch)
		send := func() error {
			if err := ctx.Err(); err != nil {
				return err // not a select's coin toss with room in ch
			}
			select {
			case ch <- batch:
				select {
				case batch = <-free:
				default:
					batch = make([]item, 0, readAheadBatch)
				}
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		readErr = each(func(row schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
			batch = append(batch, item{row, steps, rewards})
			if len(batch) < readAheadBatch {
				return nil
			}
			return send()
		})
		// What was read before an error is written, as it would have been
		// without the read-ahead.
		if len(batch) > 0 {
			if err := send(); readErr == nil {
				readErr = err
			}
		}
	}()
	var err error
read:
	for b := range ch {
		for _, it := range b {
			if err = fn(it.row, it.steps, it.rewards); err != nil {
				break read
			}
		}
		clear(b) // fn may keep the steps; the batch must not
		select {
		case free <- b[:0]:
		default:
		}
	}
	cancel() // a reader still going stops at its next hand-off
	for range ch {
	}
	<-done
	if err != nil {
		return err
	}
	return readErr
}

// describe fills what the manifest says of ep's task: the instruction (the
// user message) and the verify command. A task missing from the manifest
// is an error where the instruction is needed.
func (in *input) describe(ep *model.Episode, needTask bool) error {
	if t, ok := in.tasks[ep.Row.TaskID]; ok {
		ep.Instruction = t.Instruction
		actions, ok := in.actions[ep.Row.TaskID]
		if !ok {
			// Once per task, not per episode: the list is the same for
			// all its episodes, which only read it.
			actions = t.AllowedActions()
			in.actions[ep.Row.TaskID] = actions
		}
		ep.TaskActions = actions
		ep.TaskShell = policy.ExecShell(t.Shell, in.forksMemory)
		if t.Verify != nil {
			ep.VerifyCmd = t.Verify.Cmd
		}
		return nil
	}
	if needTask {
		return badInput{fielderr.Errorf("export", "Inputs", in.path, "episode %s: task %q is not among the manifest's task specs", ep.Row.EpisodeID, ep.Row.TaskID)}
	}
	return nil
}

// corruptInput marks a damaged input (a shard that fails its sha256 or
// cannot be decoded) as bad input: retrying will not help, and nothing is
// written. Other errors pass unchanged.
func corruptInput(path string, err error) error {
	if errors.Is(err, shard.ErrCorrupt) && !errors.Is(err, ErrBadInput) {
		return badInput{fielderr.New("export", "Inputs", path, err)}
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
	if rep.Unit == "pairs" {
		return badInput{fielderr.Sentence("export", "Target", "dpo", "found no preference pair among the %d selected episodes (%s); pairs are drawn from one group "+
			"(the same task, task spec, golden checkpoint and prompt) and need rewards that differ; nothing written",
			refused, rep.RefusedText())}
	}
	if refused > 0 {
		return badInput{fielderr.Sentence("export", "Target", o.Target, "refused every one of the %d selected episodes (%s); nothing written", refused, rep.RefusedText())}
	}
	return bad("export: no episode to write: %d read, %d filtered out; nothing written", rep.Read, rep.Filtered)
}

// splitKey is what an episode's split is drawn from: a branch's root (the
// episode its tree starts from), so that a whole tree — every GRPO group
// and preference pair in it, at every depth — lands in one split; an
// episode's own id otherwise, as before branching existed. roots maps
// each branch episode to its root (treeRoots).
func splitKey(row schemas.EpisodeRow, roots map[string]string) string {
	if r, ok := roots[row.EpisodeID]; ok {
		return r
	}
	if row.ParentEpisodeID != nil {
		return *row.ParentEpisodeID
	}
	return row.EpisodeID
}
