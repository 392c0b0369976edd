package hf

import (
	"encoding/json"
	"fmt"

	"github.com/forkline/forkline/formats/chat"
)

// RowsPer says what one row of the hf and hf-disk targets is.
type RowsPer string

// The row shapes.
const (
	RowsEpisode RowsPer = "episode" // one row per episode: conversation, screenshots, token record, rewards
	RowsStep    RowsPer = "step"    // one row per step: action, observation, screenshot, step tokens, rewards
)

// ParseRows reads the -rows flag.
func ParseRows(s string) (RowsPer, error) {
	switch RowsPer(s) {
	case RowsEpisode, RowsStep:
		return RowsPer(s), nil
	}
	return "", fmt.Errorf("hf: rows %q (known: episode, step)", s)
}

var (
	str     = Value("string")
	i8      = Value("int8")
	i32     = Value("int32")
	f32     = Value("float32")
	f64     = Value("float64")
	boolean = Value("bool")
)

// MessageFeature is a chat message: OpenAI's shape with the tool-call
// arguments as a JSON string (one Arrow type for every tool) and the
// model's reasoning as reasoning_content, the key chat templates read.
var MessageFeature = Struct{
	{"role", str},
	{"content", str},
	{"reasoning_content", str},
	{"tool_calls", List{Struct{
		{"id", str},
		{"type", str},
		{"function", Struct{{"name", str}, {"arguments", str}}},
	}}},
	{"tool_call_id", str},
}

// EpisodeFeatures are the columns of an episode row.
var EpisodeFeatures = Features{
	{"episode_id", str},
	{"run_id", str},
	{"task_id", str},
	{"instruction", str},
	{"exit_reason", str},
	{"answer", str},
	{"steps", i32},
	{"reward", f64},
	{"rewards", List{Struct{{"name", str}, {"step_index", i32}, {"value", f64}}}},
	{"messages", List{MessageFeature}},
	{"tools", str},
	{"screenshots", List{Image{}}},
	{"prompt_ids", List{i32}},
	{"response_ids", List{i32}},
	{"response_mask", List{i8}},
	{"response_logprobs", List{f32}},
	{"token_drift", boolean},
	{"duration_ms", f64},
}

// StepFeatures are the columns of a step row.
var StepFeatures = Features{
	{"episode_id", str},
	{"run_id", str},
	{"task_id", str},
	{"step_index", i32},
	{"action_kind", str},
	{"action_json", str},
	{"model_text", str},
	{"reasoning", str},
	{"output", str},
	{"exit_code", i32},
	{"is_error", boolean},
	{"error_kind", str},
	{"timed_out", boolean},
	{"truncated", boolean},
	{"screenshot", Image{}},
	{"screenshot_sha256", str},
	{"a11y_tree", str},
	{"prompt_ids", List{i32}},
	{"response_ids", List{i32}},
	{"response_logprobs", List{f32}},
	{"policy_ms", f64},
	{"env_ms", f64},
	{"step_reward", f64},
	{"episode_reward", f64},
	{"exit_reason", str},
}

// FeaturesFor returns the columns of a row shape.
func FeaturesFor(r RowsPer) Features {
	if r == RowsStep {
		return StepFeatures
	}
	return EpisodeFeatures
}

// MessageValues converts chat messages into MessageFeature values, with
// tool-call arguments as JSON strings.
func MessageValues(msgs []chat.Message) []any {
	out, _ := MessageValuesWith(msgs, func(raw json.RawMessage) (any, error) { return string(raw), nil })
	return out
}

// MessageValuesWith converts chat messages into row values, turning each
// tool call's arguments with args (a JSON string for HF, an object for verl).
func MessageValuesWith(msgs []chat.Message, args func(json.RawMessage) (any, error)) ([]any, error) {
	out := make([]any, len(msgs))
	for i, m := range msgs {
		v := map[string]any{"role": m.Role, "content": m.Content}
		if m.Reasoning != "" {
			v["reasoning_content"] = m.Reasoning
		}
		if m.ToolCallID != "" {
			v["tool_call_id"] = m.ToolCallID
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]any, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				a, err := args(tc.Arguments)
				if err != nil {
					return nil, fmt.Errorf("tool call %s: %w", tc.ID, err)
				}
				calls[j] = map[string]any{"id": tc.ID, "type": "function",
					"function": map[string]any{"name": tc.Name, "arguments": a}}
			}
			v["tool_calls"] = calls
		}
		out[i] = v
	}
	return out, nil
}

// ToolsJSON is the tools column: the episode's tools (chat.Episode.Tools)
// as one JSON string, or nil (null) when its policy offered none as
// functions. Tool schemas differ in shape, so no single Arrow struct holds
// them without inventing null keys; TRL accepts tools as a JSON string.
func ToolsJSON(ep *chat.Episode) any {
	t := ep.Tools()
	if t == nil {
		return nil
	}
	b, err := json.Marshal(t)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// EpisodeRow builds ep's episode row; tools is its tools column value
// (ToolsJSON, which callers may cache by ep.ToolsKey()).
func EpisodeRow(ep *chat.Episode, tools any) (Row, error) {
	msgs, err := chat.Messages(ep)
	if err != nil {
		return nil, err
	}
	shots := []any{}
	for i := range ep.Steps {
		png, err := ep.Screenshot(i)
		if err != nil {
			return nil, err
		}
		if len(png) > 0 {
			shots = append(shots, png)
		}
	}
	rewards := make([]any, 0, len(ep.Rewards))
	for _, r := range ep.Rewards {
		rewards = append(rewards, map[string]any{"name": r.Name, "step_index": r.StepIndex, "value": r.Value})
	}
	e := &ep.Row
	row := Row{
		"episode_id":    e.EpisodeID,
		"run_id":        e.RunID,
		"task_id":       e.TaskID,
		"instruction":   ep.Instruction,
		"exit_reason":   e.ExitReason,
		"answer":        e.Answer,
		"steps":         e.Steps,
		"reward":        ep.Reward(),
		"rewards":       rewards,
		"messages":      MessageValues(msgs),
		"tools":         tools,
		"screenshots":   shots,
		"prompt_ids":    e.PromptIDs,
		"response_ids":  e.ResponseIDs,
		"response_mask": Mask8(e.ResponseMask),
		"token_drift":   e.TokenDrift,
		"duration_ms":   e.DurationMS,
	}
	if len(e.ResponseLogprobs) > 0 || len(e.ResponseIDs) == 0 {
		row["response_logprobs"] = e.ResponseLogprobs
	}
	return row, nil
}

// StepRows builds ep's step rows and calls fn with each, in step order.
func StepRows(ep *chat.Episode, fn func(Row) error) error {
	epReward := ep.Reward()
	for i := range ep.Steps {
		s := &ep.Steps[i]
		png, err := ep.Screenshot(i)
		if err != nil {
			return err
		}
		row := Row{
			"episode_id":     s.EpisodeID,
			"run_id":         ep.Row.RunID,
			"task_id":        s.TaskID,
			"step_index":     s.StepIndex,
			"action_kind":    s.ActionKind,
			"action_json":    s.ActionJSON,
			"model_text":     s.ModelText,
			"reasoning":      s.Reasoning,
			"output":         s.Output,
			"exit_code":      s.ExitCode,
			"is_error":       s.IsError,
			"error_kind":     s.ErrorKind,
			"timed_out":      s.TimedOut,
			"truncated":      s.Truncated,
			"screenshot":     png,
			"a11y_tree":      nonEmpty(s.AXTree),
			"prompt_ids":     s.PromptIDs,
			"response_ids":   s.ResponseIDs,
			"policy_ms":      s.PolicyMS,
			"env_ms":         s.EnvMS,
			"step_reward":    ep.StepReward(i),
			"episode_reward": epReward,
			"exit_reason":    ep.Row.ExitReason,
		}
		if s.ScreenHash != "" {
			row["screenshot_sha256"] = s.ScreenHash
		}
		if len(s.ResponseLogprobs) > 0 || len(s.ResponseIDs) == 0 {
			row["response_logprobs"] = s.ResponseLogprobs
		}
		if err := fn(row); err != nil {
			return err
		}
	}
	return nil
}

func nonEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Mask8 converts a 0/1 mask to int8.
func Mask8(m []int32) []int8 {
	out := make([]int8, len(m))
	for i, v := range m {
		out[i] = int8(v)
	}
	return out
}
