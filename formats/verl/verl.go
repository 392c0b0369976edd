// Package verl writes the Parquet files verl's trainers read:
//
//   - verl-agent: rows in the shape of verl's AgentLoopOutput (prompt_ids,
//     response_ids, response_mask 1 = model / 0 = environment,
//     response_logprobs, reward_score, num_turns, extra_fields) next to the
//     prompt columns RLHFDataset reads, so that RLHFDataset loads the file
//     and the agent loop docs/verl_agent_loop.py registers as agent_name
//     "forkline_replay" returns the recorded tokens instead of generating
//     (verl has no loader of its own for token trajectories collected
//     elsewhere). One row per episode (RowsEpisode: the episode's assembled
//     token record) or per model turn (RowsTurn: that turn's prompt and
//     response ids exactly as the server reported them, so an episode whose
//     history re-rendered differently — token drift — is still usable).
//   - verl-sft: the multi-turn Parquet MultiTurnSFTDataset reads (messages,
//     tools, enable_thinking), with the documented dataset class
//     docs/verl_sft_dataset.py that turns its rows into exact messages.
//
// It knows formats/model's Episode, conversations and typed table writer
// (so every file also carries datasets' features). It does not select,
// split or read episodes (package export) and imports no other target.
//
// # Layout
//
//	DIR/<split>.parquet   one file per split that gets a row (train.parquet, ...);
//	                      a split without rows has no file: verl's RLHFDataset
//	                      loads each file through datasets, which cannot load
//	                      an empty one
//
// # verl-agent choices
//
// Tokens are never invented: an episode without a token record (a scripted
// policy, tokens dropped by the capture policy), whose episode record was
// cut by drift (RowsEpisode), or without a turn carrying ids (RowsTurn) is
// refused with a model.Refusal, which the export counts and reports. So is
// an episode without a reward: verl would then score the row by its
// data_source, and nothing in verl scores "forkline" (reward_score is never
// null here). -max-prompt-tokens and -max-response-tokens refuse rows
// longer than verl's rollout.prompt_length / response_length would take.
// The selected rows must all have logprobs or all have none: verl batches a
// step's rows together and reads logprobs from the first one; a mix fails
// the export (model.ErrSelection) naming the -where that splits it.
//
// reward_score is the episode reward, or with Advantage grpo/rloo the
// group-relative advantage computed at export time over the episode's group
// (model.Episode.GroupID): verl gives every row its own uid, so with
// rollout.n = 1 its GRPO and RLOO see groups of one, where the score passes
// unchanged — the precomputed advantage is then what verl trains on. The
// raw reward stays in extra_info.reward; the group in the group_id column.
//
// num_turns counts the chat turns the record spans: the prompt's user turn,
// each model turn and each environment turn between two model turns (2 ×
// token_turns; 2 for a turn row). extra_info.index counts rows per split
// from 0. data_source "forkline", ability "agent", reward_model
// {style: "forkline_verify", ground_truth: the task's verify command}.
package verl

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/forkline/forkline/fielderr"

	"github.com/forkline/forkline/formats/model"
)

// DataSource and Ability are the constant columns of verl-agent rows.
const (
	DataSource  = "forkline"
	Ability     = "agent"
	RewardStyle = "forkline_verify"
	// AgentName is the agent loop docs/verl_agent_loop.py registers.
	AgentName = "forkline_replay"
)

var (
	str = model.Value("string")
	i8  = model.Value("int8")
	i32 = model.Value("int32")
	i64 = model.Value("int64")
	f32 = model.Value("float32")
	f64 = model.Value("float64")
	bl  = model.Value("bool")
)

// PromptFeatures are the RLHFDataset columns of verl-agent.
var PromptFeatures = model.Features{
	{Name: "data_source", Type: str},
	{Name: "prompt", Type: model.List{Item: model.Struct{{Name: "role", Type: str}, {Name: "content", Type: str}}}},
	{Name: "ability", Type: str},
	{Name: "reward_model", Type: model.Struct{{Name: "style", Type: str}, {Name: "ground_truth", Type: str}}},
	{Name: "extra_info", Type: model.Struct{
		{Name: "split", Type: str},
		{Name: "index", Type: i64},
		{Name: "episode_id", Type: str},
		{Name: "task_id", Type: str},
		{Name: "run_id", Type: str},
		{Name: "exit_reason", Type: str},
		{Name: "reward", Type: f64},
		{Name: "turn", Type: i32},
	}},
}

// AgentFeatures are the verl-agent columns.
var AgentFeatures = append(slices.Clone(PromptFeatures),
	model.Field{Name: "agent_name", Type: str},
	model.Field{Name: "group_id", Type: str},
	model.Field{Name: "prompt_ids", Type: model.List{Item: i32}},
	model.Field{Name: "response_ids", Type: model.List{Item: i32}},
	model.Field{Name: "response_mask", Type: model.List{Item: i8}},
	model.Field{Name: "response_logprobs", Type: model.List{Item: f32}},
	model.Field{Name: "reward_score", Type: f64},
	model.Field{Name: "num_turns", Type: i32},
	model.Field{Name: "extra_fields", Type: model.Struct{
		{Name: "traj_exit_reason", Type: str},
		{Name: "task_id", Type: str},
		{Name: "episode_id", Type: str},
		{Name: "run_id", Type: str},
		{Name: "token_turns", Type: i32},
		{Name: "turn", Type: i32},
		// group_id is the GRPO group key: the trajectories that share a
		// prefix (branches of one branch point, or the episodes of one task
		// spec). verl draws a fresh uid per row; a loop that returns
		// extra_fields puts it beside uid, for a trainer to group by.
		{Name: "group_id", Type: str},
	}},
)

// RowsPer says what one verl-agent row is.
type RowsPer string

// The row shapes.
const (
	RowsEpisode RowsPer = "episode" // the episode's assembled token record
	RowsTurn    RowsPer = "turn"    // one model turn: its prompt ids and response ids as the server reported them
)

// Advantage is what reward_score holds.
type Advantage string

// The choices.
const (
	AdvantageNone Advantage = "none" // the episode reward
	// AdvantageGRPO is (reward − group mean) / (group std + 1e-6), the
	// standard deviation unbiased, as verl's compute_grpo_outcome_advantage
	// computes them; 0 in a group of one.
	AdvantageGRPO Advantage = "grpo"
	// AdvantageRLOO is reward − the mean of the group's other rewards, as
	// verl's compute_rloo_outcome_advantage; 0 in a group of one.
	AdvantageRLOO Advantage = "rloo"
)

// ParseAdvantage reads -advantage.
func ParseAdvantage(s string) (Advantage, error) {
	switch Advantage(s) {
	case AdvantageNone, AdvantageGRPO, AdvantageRLOO:
		return Advantage(s), nil
	}
	return "", fielderr.Sentence("verl", "Advantage", strconv.Quote(s), "(known: none, grpo, rloo)")
}

// Group is what the export knows of one group's rewards before writing.
type Group struct {
	Rewards []float64 // the selected episodes' rewards (null rewards left out)
}

// AgentOptions configure the verl-agent writer.
type AgentOptions struct {
	Rows              RowsPer // RowsEpisode when empty
	MaxPromptTokens   int     // 0: no limit
	MaxResponseTokens int     // 0: no limit
	Advantage         Advantage
	// Groups are the selected episodes' rewards by group id; required for
	// AdvantageGRPO and AdvantageRLOO.
	Groups map[string]*Group
}

// Refusal reasons of verl-agent.
const (
	RefusedNoTokens       = "no token record (only a -policy openai run against a server that returns token ids, vLLM or SGLang, with capture tokens keep, has one; a script run has none)"
	RefusedDrift          = "token record cut by retokenization drift (export -rows turn keeps its turns)"
	RefusedNoReward       = "no reward (verl would score the row by data_source, and nothing scores forkline)"
	RefusedPromptTooLong  = "prompt longer than -max-prompt-tokens"
	RefusedResponseToLong = "response longer than -max-response-tokens"
)

// splitFiles holds one Parquet file per split, opened on its first row.
type splitFiles struct {
	dir   string
	fs    model.Features
	known map[string]bool
	files map[string]*splitFile
	order []string
	err   error
}

type splitFile struct {
	f    *os.File
	tw   *model.TableWriter
	rows int64
}

func newSplits(dir string, splits []string, fs model.Features) *splitFiles {
	s := &splitFiles{dir: dir, fs: fs, known: map[string]bool{}, files: map[string]*splitFile{}}
	for _, n := range splits {
		s.known[n] = true
	}
	return s
}

// file returns ep's split file, creating it on first use.
func (s *splitFiles) file(ep *model.Episode) (*splitFile, error) {
	if s.err != nil {
		return nil, s.err
	}
	if !s.known[ep.Split] {
		return nil, fmt.Errorf("verl: episode %s: unknown split %q", ep.Row.EpisodeID, ep.Split)
	}
	if f, ok := s.files[ep.Split]; ok {
		return f, nil
	}
	osf, err := os.Create(filepath.Join(s.dir, ep.Split+".parquet"))
	if err != nil {
		s.err = fmt.Errorf("verl: %w", err)
		return nil, s.err
	}
	tw, err := model.NewParquetWriter(osf, s.fs)
	if err != nil {
		osf.Close()
		s.err = err
		return nil, err
	}
	f := &splitFile{f: osf, tw: tw}
	s.files[ep.Split] = f
	s.order = append(s.order, ep.Split)
	return f, nil
}

func (s *splitFiles) append(f *splitFile, r model.Row) error {
	if err := f.tw.Append(r); err != nil {
		s.err = err
		return err
	}
	f.rows++
	return nil
}

// close finishes every file (footer, sync, close).
func (s *splitFiles) close() error {
	err := s.err
	for _, name := range s.order {
		f := s.files[name]
		cerr := f.tw.Close()
		if cerr == nil {
			cerr = f.f.Sync()
		}
		if e := f.f.Close(); cerr == nil {
			cerr = e
		}
		if err == nil && cerr != nil {
			err = fmt.Errorf("verl: %s.parquet: %w", name, cerr)
		}
	}
	s.files, s.order = nil, nil
	return err
}

// RefusedImages is the refusal of a verl-agent row whose prompts carried
// images.
const RefusedImages = "images in the prompt (verl-agent rows carry no multi_modal_data; export verl-sft, hf or chat-jsonl)"

func promptValues(ep *model.Episode) []any {
	msgs := model.Prompt(ep)
	out := make([]any, len(msgs))
	for i, m := range msgs {
		out[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	return out
}

func promptRow(ep *model.Episode, index int64, turn *int32) model.Row {
	e := &ep.Row
	return model.Row{
		"data_source":  DataSource,
		"prompt":       promptValues(ep),
		"ability":      Ability,
		"reward_model": map[string]any{"style": RewardStyle, "ground_truth": ep.VerifyCmd},
		"extra_info": map[string]any{
			"split": ep.Split, "index": index, "episode_id": e.EpisodeID, "task_id": e.TaskID,
			"run_id": e.RunID, "exit_reason": e.ExitReason, "reward": ep.Reward(), "turn": turn,
		},
	}
}

// AgentWriter writes verl-agent.
type AgentWriter struct {
	s   *splitFiles
	opt AgentOptions
	// Rows with and without logprobs, and an example of each, for the mix
	// check at Close.
	withLP, withoutLP int64
	exWith, exWithout string
}

// NewAgentWriter writes DIR/<split>.parquet for each split that gets a row.
func NewAgentWriter(dir string, splits []string, opt AgentOptions) (*AgentWriter, error) {
	if opt.Rows == "" {
		opt.Rows = RowsEpisode
	}
	if opt.Advantage == "" {
		opt.Advantage = AdvantageNone
	}
	if _, err := ParseAdvantage(string(opt.Advantage)); err != nil {
		return nil, err
	}
	if opt.Rows != RowsEpisode && opt.Rows != RowsTurn {
		return nil, fielderr.Sentence("verl", "Rows", strconv.Quote(string(opt.Rows)), "(known: episode, turn)")
	}
	if opt.Advantage != AdvantageNone && opt.Groups == nil {
		return nil, fielderr.Errorf("verl", "Advantage", "", "needs the groups' rewards")
	}
	return &AgentWriter{s: newSplits(dir, splits, AgentFeatures), opt: opt}, nil
}

// CheckRecord validates an episode's assembled token record against
// AgentLoopOutput's invariants. It returns a *model.Refusal for an episode
// without a usable record, and an error for a record that breaks an
// invariant (the dataset is then corrupt: shard.Commit checks the same).
func CheckRecord(ep *model.Episode) error {
	e := &ep.Row
	if len(e.PromptIDs) == 0 || len(e.ResponseIDs) == 0 || e.TokenTurns == 0 {
		return &model.Refusal{Reason: RefusedNoTokens}
	}
	if e.TokenDrift {
		return &model.Refusal{Reason: RefusedDrift}
	}
	return checkAligned(e.EpisodeID, -1, e.ResponseIDs, e.ResponseMask, e.ResponseLogprobs)
}

func checkAligned(id string, turn int, ids, mask []int32, lp []float32) error {
	where := "episode " + id
	if turn >= 0 {
		where += fmt.Sprintf(" turn %d", turn)
	}
	if len(mask) != len(ids) {
		return fmt.Errorf("verl: %s: %d response_mask values for %d response_ids", where, len(mask), len(ids))
	}
	if len(lp) != 0 && len(lp) != len(ids) {
		return fmt.Errorf("verl: %s: %d response_logprobs for %d response_ids", where, len(lp), len(ids))
	}
	for i, m := range mask {
		if m != 0 && m != 1 {
			return fmt.Errorf("verl: %s: response_mask[%d] = %d, want 0 or 1", where, i, m)
		}
	}
	return nil
}

// score is the row's reward_score: the reward or its group advantage.
func (w *AgentWriter) score(ep *model.Episode, r float64) float64 {
	if w.opt.Advantage == AdvantageNone {
		return r
	}
	g := w.opt.Groups[ep.GroupID()]
	if g == nil || len(g.Rewards) < 2 {
		return 0
	}
	return GroupAdvantage(w.opt.Advantage, r, g.Rewards)
}

// GroupAdvantage is reward r's advantage in a group with rewards (which
// include r), as verl computes it for a group (see Advantage).
func GroupAdvantage(a Advantage, r float64, rewards []float64) float64 {
	n := float64(len(rewards))
	if n < 2 {
		return 0
	}
	sum := 0.0
	for _, v := range rewards {
		sum += v
	}
	mean := sum / n
	switch a {
	case AdvantageRLOO:
		return (r - (sum-r)/(n-1))
	case AdvantageGRPO:
		ss := 0.0
		for _, v := range rewards {
			ss += (v - mean) * (v - mean)
		}
		return (r - mean) / (math.Sqrt(ss/(n-1)) + 1e-6)
	}
	return r
}

// Write appends ep's row (or its turn rows), or refuses it.
func (w *AgentWriter) Write(ep *model.Episode) error {
	// An image's placeholder ids without its pixels would train a VLM on
	// nothing: verl's multi_modal_data is not written, so such episodes
	// are refused, never exported without their images.
	for i := range ep.Steps {
		if len(ep.Steps[i].PromptImages) > 0 {
			return &model.Refusal{Reason: RefusedImages}
		}
	}
	reward := ep.Reward()
	if w.opt.Rows == RowsTurn {
		return w.writeTurns(ep, reward)
	}
	if err := CheckRecord(ep); err != nil {
		return err
	}
	if reward == nil {
		return &model.Refusal{Reason: RefusedNoReward}
	}
	e := &ep.Row
	if err := w.checkLength(len(e.PromptIDs), len(e.ResponseIDs)); err != nil {
		return err
	}
	f, err := w.s.file(ep)
	if err != nil {
		return err
	}
	row := promptRow(ep, f.rows, nil)
	w.fill(row, ep, *reward, e.PromptIDs, e.ResponseIDs, model.Mask8(e.ResponseMask), e.ResponseLogprobs, 2*e.TokenTurns, e.TokenTurns, nil)
	return w.s.append(f, row)
}

func (w *AgentWriter) checkLength(prompt, response int) error {
	if w.opt.MaxPromptTokens > 0 && prompt > w.opt.MaxPromptTokens {
		return &model.Refusal{Reason: RefusedPromptTooLong}
	}
	if w.opt.MaxResponseTokens > 0 && response > w.opt.MaxResponseTokens {
		return &model.Refusal{Reason: RefusedResponseToLong}
	}
	return nil
}

// writeTurns writes one row per model turn that carries the server's ids.
// A turn without ids is left out (never invented); an episode none of whose
// turns has ids is refused.
func (w *AgentWriter) writeTurns(ep *model.Episode, reward *float64) error {
	type turn struct {
		step int
		i    int32
	}
	var turns []turn
	for i := range ep.Steps {
		s := &ep.Steps[i]
		if len(s.PromptIDs) == 0 || len(s.ResponseIDs) == 0 {
			continue
		}
		mask := s.ResponseMask
		if len(mask) == 0 {
			mask = ones(len(s.ResponseIDs))
		}
		if err := checkAligned(ep.Row.EpisodeID, int(s.StepIndex), s.ResponseIDs, mask, s.ResponseLogprobs); err != nil {
			return err
		}
		turns = append(turns, turn{i, int32(len(turns))})
	}
	if len(turns) == 0 {
		return &model.Refusal{Reason: RefusedNoTokens}
	}
	if reward == nil {
		return &model.Refusal{Reason: RefusedNoReward}
	}
	// Turns longer than the limits are left out; an episode left with none
	// is refused for the first limit one of its turns broke.
	var kept []turn
	var tooLong error
	for _, t := range turns {
		s := &ep.Steps[t.step]
		if err := w.checkLength(len(s.PromptIDs), len(s.ResponseIDs)); err != nil {
			if tooLong == nil {
				tooLong = err
			}
			continue
		}
		kept = append(kept, t)
	}
	if len(kept) == 0 {
		return tooLong
	}
	turns = kept
	for _, t := range turns {
		s := &ep.Steps[t.step]
		f, err := w.s.file(ep)
		if err != nil {
			return err
		}
		mask := s.ResponseMask
		if len(mask) == 0 {
			mask = ones(len(s.ResponseIDs))
		}
		idx := t.i
		row := promptRow(ep, f.rows, &idx)
		w.fill(row, ep, *reward, s.PromptIDs, s.ResponseIDs, model.Mask8(mask), s.ResponseLogprobs, 2, 1, &idx)
		if err := w.s.append(f, row); err != nil {
			return err
		}
	}
	return nil
}

func ones(n int) []int32 {
	m := make([]int32, n)
	for i := range m {
		m[i] = 1
	}
	return m
}

func (w *AgentWriter) fill(row model.Row, ep *model.Episode, reward float64, prompt, response []int32, mask []int8, lp []float32, numTurns, tokenTurns int32, turn *int32) {
	e := &ep.Row
	row["agent_name"] = AgentName
	row["group_id"] = ep.GroupID()
	row["prompt_ids"] = prompt
	row["response_ids"] = response
	row["response_mask"] = mask
	if len(lp) > 0 {
		row["response_logprobs"] = lp
		w.withLP++
		if w.exWith == "" {
			w.exWith = e.EpisodeID
		}
	} else {
		w.withoutLP++
		if w.exWithout == "" {
			w.exWithout = e.EpisodeID
		}
	}
	row["reward_score"] = w.score(ep, reward)
	row["num_turns"] = numTurns
	row["extra_fields"] = map[string]any{
		"traj_exit_reason": e.ExitReason, "task_id": e.TaskID, "episode_id": e.EpisodeID,
		"run_id": e.RunID, "token_turns": tokenTurns, "turn": turn, "group_id": ep.GroupID(),
	}
}

// Close finishes the files. Rows with and without logprobs together fail
// it with model.ErrSelection.
func (w *AgentWriter) Close() error {
	err := w.s.close()
	if err == nil && w.withLP > 0 && w.withoutLP > 0 {
		return fmt.Errorf("%w: verl-agent: %d of %d rows have no response_logprobs (episode %s has none, %s has them): "+
			"verl batches rows together and reads logprobs from the first one (agent_loop.py _postprocess), so it cannot mix them; "+
			"export them apart with -where has_logprobs=true and -where has_logprobs=false",
			model.ErrSelection, w.withoutLP, w.withLP+w.withoutLP, w.exWithout, w.exWith)
	}
	return err
}
