// Package atif writes episodes as Harbor's Agent Trajectory Interchange
// Format (target atif): one trajectory JSON document per episode, the
// conversation as formats/model builds it (model.Messages) laid out as
// ATIF steps, with the server's token ids and logprobs in each agent
// step's metrics.
//
// It knows formats/model and schemas only. It does not select, split or
// read episodes (package export) and imports no other target.
//
// # Version
//
// The trajectories state SchemaVersion, "ATIF-v1.4": the version of the
// RFC (Harbor's docs/rfcs/0001-trajectory-format.md) whose text this
// writer follows field by field, the first with prompt_token_ids. Later
// versions only add optional fields, and Harbor's reader accepts the
// earlier version strings, so a v1.4 document stays valid for them.
//
// # Layout
//
//	DIR/<split>/<episode_id>.json   one trajectory per episode
//
// One file per episode is what Harbor's tools read (a trial's
// agent/trajectory.json); an episode id that is not a plain file name
// (letters, digits, '.', '_', '-') is refused, never used as a path.
//
// # Mapping
//
//   - the policy's system prompt: a "system" step; the task's instruction
//     (and a web task's start page as the model saw it): a "user" step;
//   - each model turn: an "agent" step with the model's text as message,
//     its reasoning as reasoning_content, its tool call (function_name the
//     action tool, arguments as the model wrote them when they are a JSON
//     object, else {"text": "..."}), the result the model was shown as the
//     observation (source_call_id the call's id; a text-mode turn's result
//     has none), model_name, the step's start as timestamp, and metrics:
//     prompt_tokens, completion_tokens, prompt_token_ids,
//     completion_token_ids and logprobs as the server reported them (only
//     the fields the run recorded);
//   - what ATIF has no field for goes in extra: the episode's rewards,
//     exit reason, run, task and lineage at the root; a step's exit code,
//     screenshot hash and images the model saw in the step's extra.
package atif

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/schemas"
)

// SchemaVersion is the ATIF version every trajectory states.
const SchemaVersion = "ATIF-v1.4"

// AgentName is the agent every trajectory names, unless an agent harness
// ran the episode (then its harness and version).
const AgentName = "forkline"

// Trajectory is ATIF's root object.
type Trajectory struct {
	SchemaVersion string         `json:"schema_version"`
	SessionID     string         `json:"session_id"`
	Agent         Agent          `json:"agent"`
	Steps         []Step         `json:"steps"`
	Notes         string         `json:"notes,omitempty"`
	FinalMetrics  *FinalMetrics  `json:"final_metrics,omitempty"`
	Extra         map[string]any `json:"extra,omitempty"`
}

// Agent is ATIF's AgentSchema.
type Agent struct {
	Name      string         `json:"name"`
	Version   string         `json:"version"`
	ModelName string         `json:"model_name,omitempty"`
	Extra     map[string]any `json:"extra,omitempty"`
}

// Step is ATIF's StepObject.
type Step struct {
	StepID           int            `json:"step_id"`
	Timestamp        string         `json:"timestamp,omitempty"`
	Source           string         `json:"source"` // system, user or agent
	ModelName        string         `json:"model_name,omitempty"`
	Message          string         `json:"message"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall     `json:"tool_calls,omitempty"`
	Observation      *Observation   `json:"observation,omitempty"`
	Metrics          *Metrics       `json:"metrics,omitempty"`
	Extra            map[string]any `json:"extra,omitempty"`
}

// ToolCall is ATIF's ToolCallSchema.
type ToolCall struct {
	ToolCallID   string          `json:"tool_call_id"`
	FunctionName string          `json:"function_name"`
	Arguments    json.RawMessage `json:"arguments"` // a JSON object
}

// Observation is ATIF's ObservationSchema.
type Observation struct {
	Results []Result `json:"results"`
}

// Result is ATIF's ObservationResultSchema.
type Result struct {
	SourceCallID string `json:"source_call_id,omitempty"`
	Content      string `json:"content"`
}

// Metrics is ATIF's MetricsSchema, the fields forkline records.
type Metrics struct {
	PromptTokens       *int      `json:"prompt_tokens,omitempty"`
	CompletionTokens   *int      `json:"completion_tokens,omitempty"`
	PromptTokenIDs     []int32   `json:"prompt_token_ids,omitempty"`
	CompletionTokenIDs []int32   `json:"completion_token_ids,omitempty"`
	Logprobs           []float32 `json:"logprobs,omitempty"`
}

// FinalMetrics is ATIF's FinalMetricsSchema.
type FinalMetrics struct {
	TotalPromptTokens     *int `json:"total_prompt_tokens,omitempty"`
	TotalCompletionTokens *int `json:"total_completion_tokens,omitempty"`
	TotalSteps            int  `json:"total_steps"`
}

// Options configure a Writer.
type Options struct {
	// Conversation says how the messages are built (tool-call arguments,
	// reasoning); the defaults keep the model's reasoning where it saw it.
	Conversation model.Options
	// ToolVersion says the forkline version that recorded a run, by run
	// id: the agent's version in its trajectories ("unknown" when absent).
	ToolVersion func(runID string) string
}

// Writer writes one trajectory file per episode.
type Writer struct {
	dir    string
	splits map[string]bool
	made   map[string]bool
	o      Options
	counts map[string]int64
}

// NewWriter returns a Writer into dir for the named splits.
func NewWriter(dir string, splits []string, o Options) *Writer {
	w := &Writer{dir: dir, splits: map[string]bool{}, made: map[string]bool{}, o: o, counts: map[string]int64{}}
	for _, s := range splits {
		w.splits[s] = true
	}
	return w
}

var plainName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*$`)

// Write writes ep's trajectory as DIR/<split>/<episode_id>.json.
func (w *Writer) Write(ep *model.Episode) error {
	id := ep.Row.EpisodeID
	if !plainName.MatchString(id) || len(id) > 200 {
		return &model.Refusal{Reason: "episode id is not a plain file name"}
	}
	if !w.splits[ep.Split] {
		return fmt.Errorf("atif: episode %s: unknown split %q", id, ep.Split)
	}
	t, err := Build(ep, w.o)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return fmt.Errorf("atif: episode %s: %w", id, err)
	}
	dir := filepath.Join(w.dir, ep.Split)
	if !w.made[ep.Split] {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("atif: %w", err)
		}
		w.made[ep.Split] = true
	}
	path := filepath.Join(dir, id+".json")
	// O_EXCL: two episodes with one id (refused before the export starts)
	// must never overwrite each other's file.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("atif: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("atif: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("atif: %w", err)
	}
	w.counts[ep.Split]++
	return nil
}

// Close finishes the export; the files are complete as each is written.
func (w *Writer) Close() error { return nil }

// Build is ep's trajectory.
func Build(ep *model.Episode, o Options) (*Trajectory, error) {
	msgs, err := model.Messages(ep, o.Conversation)
	if err != nil {
		return nil, fmt.Errorf("atif: %w", err)
	}
	row := &ep.Row
	version := "unknown"
	if o.ToolVersion != nil {
		if v := o.ToolVersion(row.RunID); v != "" {
			version = v
		}
	}
	t := &Trajectory{SchemaVersion: SchemaVersion, SessionID: row.EpisodeID,
		Agent: Agent{Name: AgentName, Version: version}, Steps: []Step{}}
	rec, err := ep.AgentRecord()
	if err != nil {
		return nil, fmt.Errorf("atif: %w", err)
	}
	if rec != nil {
		t.Agent = Agent{Name: rec.Harness, Version: orUnknown(rec.Version), Extra: map[string]any{"recorded_by": AgentName + " " + version}}
	}

	steps := map[int]*schemas.StepRow{}
	for i := range ep.Steps {
		steps[int(ep.Steps[i].StepIndex)] = &ep.Steps[i]
	}
	var prompt, completion int
	var counted bool
	var last *Step // the agent step a result belongs to
	add := func(s Step) *Step {
		s.StepID = len(t.Steps) + 1
		t.Steps = append(t.Steps, s)
		return &t.Steps[len(t.Steps)-1]
	}
	for _, m := range msgs {
		switch {
		case m.Role == model.RoleSystem:
			add(Step{Source: "system", Message: m.Content})
			last = nil
		case m.Role == model.RoleAssistant:
			s := Step{Source: "agent", Message: m.Content, ReasoningContent: m.Reasoning}
			for _, c := range m.ToolCalls {
				s.ToolCalls = append(s.ToolCalls, ToolCall{ToolCallID: c.ID, FunctionName: c.Name, Arguments: objectArguments(c)})
			}
			if sr, ok := steps[m.Step]; ok {
				fillStep(&s, sr)
				if s.Metrics != nil {
					if s.Metrics.PromptTokens != nil {
						prompt += *s.Metrics.PromptTokens
						counted = true
					}
					if s.Metrics.CompletionTokens != nil {
						completion += *s.Metrics.CompletionTokens
						counted = true
					}
				}
			}
			if t.Agent.ModelName == "" {
				t.Agent.ModelName = s.ModelName
			}
			last = add(s)
		case m.Role == model.RoleTool && last != nil:
			addResult(last, Result{SourceCallID: m.ToolCallID, Content: m.Content}, m)
		case m.Role == model.RoleUser && m.Step >= 0 && last != nil:
			// A text-mode result, or the screenshot that followed a tool
			// result: what the environment answered the last turn.
			addResult(last, Result{Content: m.Content}, m)
		default:
			s := Step{Source: "user", Message: m.Content}
			if imgs := imageHashes(m); len(imgs) > 0 {
				s.Extra = map[string]any{"images": imgs}
			}
			add(s)
			last = nil
		}
	}
	t.FinalMetrics = &FinalMetrics{TotalSteps: len(t.Steps)}
	if counted {
		t.FinalMetrics.TotalPromptTokens, t.FinalMetrics.TotalCompletionTokens = &prompt, &completion
	}
	t.Extra = rootExtra(ep)
	return t, nil
}

// fillStep sets what the step row records of a model turn.
func fillStep(s *Step, sr *schemas.StepRow) {
	if sr.StartedAt > 0 {
		s.Timestamp = time.UnixMilli(sr.StartedAt).UTC().Format(time.RFC3339Nano)
	}
	if sr.Model != nil {
		s.ModelName = *sr.Model
	}
	m := &Metrics{PromptTokenIDs: sr.PromptIDs, CompletionTokenIDs: sr.ResponseIDs, Logprobs: sr.ResponseLogprobs}
	if sr.PromptTokens != nil {
		m.PromptTokens = intp(int(*sr.PromptTokens))
	} else if len(sr.PromptIDs) > 0 {
		m.PromptTokens = intp(len(sr.PromptIDs))
	}
	if sr.CompletionTokens != nil {
		m.CompletionTokens = intp(int(*sr.CompletionTokens))
	} else if len(sr.ResponseIDs) > 0 {
		m.CompletionTokens = intp(len(sr.ResponseIDs))
	}
	if m.PromptTokens != nil || m.CompletionTokens != nil || len(m.PromptTokenIDs) > 0 || len(m.CompletionTokenIDs) > 0 || len(m.Logprobs) > 0 {
		s.Metrics = m
	}
	extra := map[string]any{"step_index": sr.StepIndex}
	if sr.ActionKind != "" {
		extra["exit_code"] = sr.ExitCode
		extra["is_error"] = sr.IsError
		if sr.TimedOut {
			extra["timed_out"] = true
		}
		if sr.Truncated {
			extra["truncated"] = true
		}
	}
	if sr.ScreenHash != "" {
		extra["screenshot_sha256"] = sr.ScreenHash
	}
	if sr.FinishReason != nil {
		extra["finish_reason"] = *sr.FinishReason
	}
	s.Extra = extra
}

// addResult appends a result to the agent step's observation, and the
// images the model was shown with it to the step's extra.
func addResult(s *Step, r Result, m model.Message) {
	if s.Observation == nil {
		s.Observation = &Observation{}
	}
	s.Observation.Results = append(s.Observation.Results, r)
	if imgs := imageHashes(m); len(imgs) > 0 {
		if s.Extra == nil {
			s.Extra = map[string]any{}
		}
		prev, _ := s.Extra["images"].([]string)
		s.Extra["images"] = append(prev, imgs...)
	}
}

func imageHashes(m model.Message) []string {
	var out []string
	for _, im := range m.Images {
		out = append(out, im.SHA256)
	}
	return out
}

// objectArguments is a call's arguments as ATIF wants them, a JSON object:
// the model's own when they are one, else its text under "text".
func objectArguments(c model.ToolCall) json.RawMessage {
	var probe map[string]json.RawMessage
	if len(c.Arguments) > 0 && json.Unmarshal(c.Arguments, &probe) == nil && probe != nil {
		return c.Arguments
	}
	text := c.Text
	if text == "" {
		text = string(c.Arguments)
	}
	b, _ := json.Marshal(map[string]string{"text": text})
	return b
}

// rootExtra is what the episode row and rewards say that ATIF has no field
// for.
func rootExtra(ep *model.Episode) map[string]any {
	row := &ep.Row
	x := map[string]any{
		"run_id": row.RunID, "task_id": row.TaskID, "repeat": row.Repeat,
		"exit_reason": row.ExitReason, "provider": row.Provider,
		"reward_name": ep.RewardName, "reward": ep.Reward(),
		"token_drift": row.TokenDrift,
	}
	if row.Answer != "" {
		x["answer"] = row.Answer
	}
	if row.Detail != "" {
		x["detail"] = row.Detail
	}
	if p, step, ok := row.Branched(); ok {
		x["parent_episode_id"], x["branch_step"] = p, step
	}
	if row.GroupID != nil {
		x["group_id"] = *row.GroupID
	}
	var rewards []map[string]any
	for _, r := range ep.Rewards {
		e := map[string]any{"name": r.Name, "value": r.Value, "source": r.Source}
		if r.StepIndex != nil {
			e["step_index"] = *r.StepIndex
		}
		rewards = append(rewards, e)
	}
	if rewards != nil {
		x["rewards"] = rewards
	}
	return x
}

func intp(v int) *int { return &v }

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
