// Package verl writes the Parquet files verl's trainers read:
//
//   - verl-agent: one row per episode with its assembled token record in the
//     shape of verl's AgentLoopOutput (prompt_ids, response_ids,
//     response_mask 1 = model / 0 = environment, response_logprobs,
//     reward_score, num_turns, extra_fields), next to the RL prompt columns,
//     so verl's RLHFDataset loads the file and an agent loop registered as
//     agent_name "forkline_replay" returns the recorded tokens instead of
//     generating (docs/verl_agent_loop.py; verl has no loader of its own for
//     token trajectories collected elsewhere).
//   - verl-rl: the prompt Parquet RLHFDataset reads: data_source, prompt,
//     ability, reward_model, extra_info (with index).
//   - verl-sft: the multi-turn Parquet MultiTurnSFTDataset reads: messages
//     with tool_calls (arguments as objects) and tool messages, tools as a
//     list of JSON-schema structs, enable_thinking when every input run
//     records it.
//
// It knows export/model's Episode, conversations and typed table writer
// (so every file also carries datasets' features) and the tool schemas
// (aci). It does not select, split or read episodes (package export) and
// imports no other target.
//
// # Layout
//
//	DIR/<split>.parquet   one file per split (train.parquet, test.parquet, ...),
//	                      written even when a split gets no episode
//
// # Choices
//
// verl-agent never invents tokens: an episode without a token record (a
// scripted policy, tokens dropped by the capture policy) or whose record
// stopped at a retokenization drift is refused with a model.Refusal, which
// the export counts and reports. num_turns counts the chat turns the record
// spans: the prompt's user turn, each model turn and each environment turn
// between two model turns (2 × token_turns). extra_info.index counts rows
// per split from 0. reward_score is the selected episode reward, null when
// the verifier gave none (verl's reward loop then computes one).
//
// verl-rl and verl-agent rows: data_source "forkline", ability "agent",
// reward_model {style: "forkline_verify", ground_truth: the task's verify
// command}: a forkline reward is a command run in the episode's sandbox,
// not an expected answer, so a verl reward function needs the command.
//
// verl-sft: Arrow structs have one set of keys per column, so tool-call
// arguments hold the union of every action's fields and tool parameters
// the union of every tool's properties; keys a row does not use are null.
// verl's loader passes them on as None. docs/verl_agent_loop.py has a short
// function (drop_nulls) that drops them before the chat template sees them;
// chat-jsonl and hf carry arguments as exact JSON instead.
package verl

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/forkline/forkline/export/model"
)

// DataSource and Ability are the constant columns of verl-rl and
// verl-agent rows.
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

// PromptFeatures are the RLHFDataset columns shared by verl-rl and
// verl-agent.
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
	}},
}

// AgentFeatures are the verl-agent columns.
var AgentFeatures = append(slices.Clone(PromptFeatures),
	model.Field{Name: "agent_name", Type: str},
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
		// group_id is the GRPO group key: the trajectories that share a
		// prefix (branches of one branch point, or the episodes of one task
		// spec). verl draws a fresh uid per row; a loop that returns
		// extra_fields puts it beside uid, for a trainer to group by.
		{Name: "group_id", Type: str},
	}},
)

// splitFiles holds one Parquet file per split.
type splitFiles struct {
	files map[string]*splitFile
	order []string
	err   error
}

type splitFile struct {
	f    *os.File
	tw   *model.TableWriter
	rows int64
}

func openSplits(dir string, splits []string, fs model.Features) (*splitFiles, error) {
	s := &splitFiles{files: map[string]*splitFile{}}
	for _, name := range splits {
		f, err := os.Create(filepath.Join(dir, name+".parquet"))
		if err != nil {
			s.close()
			return nil, fmt.Errorf("verl: %w", err)
		}
		tw, err := model.NewParquetWriter(f, fs)
		if err != nil {
			f.Close()
			s.close()
			return nil, err
		}
		s.files[name] = &splitFile{f: f, tw: tw}
		s.order = append(s.order, name)
	}
	return s, nil
}

// file returns ep's split file.
func (s *splitFiles) file(ep *model.Episode) (*splitFile, error) {
	if s.err != nil {
		return nil, s.err
	}
	f, ok := s.files[ep.Split]
	if !ok {
		return nil, fmt.Errorf("verl: episode %s: unknown split %q", ep.Row.EpisodeID, ep.Split)
	}
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

func promptValues(ep *model.Episode) []any {
	msgs := model.Prompt(ep)
	out := make([]any, len(msgs))
	for i, m := range msgs {
		out[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	return out
}

func promptRow(ep *model.Episode, index int64) model.Row {
	e := &ep.Row
	return model.Row{
		"data_source":  DataSource,
		"prompt":       promptValues(ep),
		"ability":      Ability,
		"reward_model": map[string]any{"style": RewardStyle, "ground_truth": ep.VerifyCmd},
		"extra_info": map[string]any{
			"split": ep.Split, "index": index, "episode_id": e.EpisodeID, "task_id": e.TaskID,
			"run_id": e.RunID, "exit_reason": e.ExitReason, "reward": ep.Reward(),
		},
	}
}

// RLWriter writes verl-rl.
type RLWriter struct{ s *splitFiles }

// NewRLWriter creates DIR/<split>.parquet for each split.
func NewRLWriter(dir string, splits []string) (*RLWriter, error) {
	s, err := openSplits(dir, splits, PromptFeatures)
	if err != nil {
		return nil, err
	}
	return &RLWriter{s: s}, nil
}

// Write appends ep's prompt row.
func (w *RLWriter) Write(ep *model.Episode) error {
	f, err := w.s.file(ep)
	if err != nil {
		return err
	}
	return w.s.append(f, promptRow(ep, f.rows))
}

// Close finishes the files.
func (w *RLWriter) Close() error { return w.s.close() }

// AgentWriter writes verl-agent.
type AgentWriter struct{ s *splitFiles }

// NewAgentWriter creates DIR/<split>.parquet for each split.
func NewAgentWriter(dir string, splits []string) (*AgentWriter, error) {
	s, err := openSplits(dir, splits, AgentFeatures)
	if err != nil {
		return nil, err
	}
	return &AgentWriter{s: s}, nil
}

// Refusal reasons of verl-agent.
const (
	RefusedNoTokens = "no token record"
	RefusedDrift    = "token record cut by retokenization drift"
)

// CheckRecord validates an episode's token record against AgentLoopOutput's
// invariants. It returns a *model.Refusal for an episode without a usable
// record, and an error for a record that breaks an invariant (the dataset
// is then corrupt: shard.Commit checks the same).
func CheckRecord(ep *model.Episode) error {
	e := &ep.Row
	if len(e.PromptIDs) == 0 || len(e.ResponseIDs) == 0 || e.TokenTurns == 0 {
		return &model.Refusal{Reason: RefusedNoTokens}
	}
	if e.TokenDrift {
		return &model.Refusal{Reason: RefusedDrift}
	}
	if len(e.ResponseMask) != len(e.ResponseIDs) {
		return fmt.Errorf("verl: episode %s: %d response_mask values for %d response_ids", e.EpisodeID, len(e.ResponseMask), len(e.ResponseIDs))
	}
	if len(e.ResponseLogprobs) != 0 && len(e.ResponseLogprobs) != len(e.ResponseIDs) {
		return fmt.Errorf("verl: episode %s: %d response_logprobs for %d response_ids", e.EpisodeID, len(e.ResponseLogprobs), len(e.ResponseIDs))
	}
	for i, m := range e.ResponseMask {
		if m != 0 && m != 1 {
			return fmt.Errorf("verl: episode %s: response_mask[%d] = %d, want 0 or 1", e.EpisodeID, i, m)
		}
	}
	return nil
}

// Write appends ep's row, or refuses it (see CheckRecord).
func (w *AgentWriter) Write(ep *model.Episode) error {
	if err := CheckRecord(ep); err != nil {
		return err
	}
	f, err := w.s.file(ep)
	if err != nil {
		return err
	}
	e := &ep.Row
	row := promptRow(ep, f.rows)
	row["agent_name"] = AgentName
	row["prompt_ids"] = e.PromptIDs
	row["response_ids"] = e.ResponseIDs
	row["response_mask"] = model.Mask8(e.ResponseMask)
	if len(e.ResponseLogprobs) > 0 {
		row["response_logprobs"] = e.ResponseLogprobs
	}
	row["reward_score"] = ep.Reward()
	row["num_turns"] = 2 * e.TokenTurns
	row["extra_fields"] = map[string]any{
		"traj_exit_reason": e.ExitReason, "task_id": e.TaskID, "episode_id": e.EpisodeID,
		"run_id": e.RunID, "token_turns": e.TokenTurns, "group_id": ep.Group,
	}
	return w.s.append(f, row)
}

// Close finishes the files.
func (w *AgentWriter) Close() error { return w.s.close() }
