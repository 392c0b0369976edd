package hf

import (
	"encoding/json"
	"fmt"

	"github.com/forkline/forkline/export/model"
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
	str     = model.Value("string")
	i8      = model.Value("int8")
	i32     = model.Value("int32")
	f32     = model.Value("float32")
	f64     = model.Value("float64")
	boolean = model.Value("bool")
)

// MessageFeature is a chat message: OpenAI's shape with the tool-call
// arguments as a JSON string (one Arrow type for every tool) and the
// model's reasoning as reasoning_content, the key chat templates read.
var MessageFeature = model.Struct{
	{Name: "role", Type: str},
	{Name: "content", Type: str},
	{Name: "reasoning_content", Type: str},
	{Name: "tool_calls", Type: model.List{Item: model.Struct{
		{Name: "id", Type: str},
		{Name: "type", Type: str},
		{Name: "function", Type: model.Struct{{Name: "name", Type: str}, {Name: "arguments", Type: str}}},
	}}},
	{Name: "tool_call_id", Type: str},
}

// EpisodeFeatures are the columns of an episode row.
var EpisodeFeatures = model.Features{
	{Name: "episode_id", Type: str},
	{Name: "run_id", Type: str},
	{Name: "task_id", Type: str},
	{Name: "instruction", Type: str},
	{Name: "exit_reason", Type: str},
	{Name: "answer", Type: str},
	{Name: "steps", Type: i32},
	{Name: "reward", Type: f64},
	{Name: "rewards", Type: model.List{Item: model.Struct{{Name: "name", Type: str}, {Name: "step_index", Type: i32}, {Name: "value", Type: f64}}}},
	{Name: "messages", Type: model.List{Item: MessageFeature}},
	{Name: "tools", Type: str},
	{Name: "screenshots", Type: model.List{Item: model.Image{}}},
	{Name: "prompt_ids", Type: model.List{Item: i32}},
	{Name: "response_ids", Type: model.List{Item: i32}},
	{Name: "response_mask", Type: model.List{Item: i8}},
	{Name: "response_logprobs", Type: model.List{Item: f32}},
	{Name: "token_drift", Type: boolean},
	{Name: "duration_ms", Type: f64},
}

// StepFeatures are the columns of a step row.
var StepFeatures = model.Features{
	{Name: "episode_id", Type: str},
	{Name: "run_id", Type: str},
	{Name: "task_id", Type: str},
	{Name: "step_index", Type: i32},
	{Name: "action_kind", Type: str},
	{Name: "action_json", Type: str},
	{Name: "model_text", Type: str},
	{Name: "reasoning", Type: str},
	{Name: "output", Type: str},
	{Name: "exit_code", Type: i32},
	{Name: "is_error", Type: boolean},
	{Name: "error_kind", Type: str},
	{Name: "timed_out", Type: boolean},
	{Name: "truncated", Type: boolean},
	{Name: "screenshot", Type: model.Image{}},
	{Name: "screenshot_sha256", Type: str},
	{Name: "a11y_tree", Type: str},
	{Name: "prompt_ids", Type: model.List{Item: i32}},
	{Name: "response_ids", Type: model.List{Item: i32}},
	{Name: "response_logprobs", Type: model.List{Item: f32}},
	{Name: "policy_ms", Type: f64},
	{Name: "env_ms", Type: f64},
	{Name: "step_reward", Type: f64},
	{Name: "episode_reward", Type: f64},
	{Name: "exit_reason", Type: str},
}

// FeaturesFor returns the columns of a row shape.
func FeaturesFor(r RowsPer) model.Features {
	if r == RowsStep {
		return StepFeatures
	}
	return EpisodeFeatures
}

// ToolsJSON is the tools column: the episode's tools (model.Episode.Tools)
// as one JSON string, or nil (null) when its policy offered none as
// functions. Tool schemas differ in shape, so no single Arrow struct holds
// them without inventing null keys; TRL accepts tools as a JSON string.
func ToolsJSON(ep *model.Episode) any {
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
func EpisodeRow(ep *model.Episode, tools any) (model.Row, error) {
	msgs, err := model.Messages(ep)
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
	row := model.Row{
		"episode_id":    e.EpisodeID,
		"run_id":        e.RunID,
		"task_id":       e.TaskID,
		"instruction":   ep.Instruction,
		"exit_reason":   e.ExitReason,
		"answer":        e.Answer,
		"steps":         e.Steps,
		"reward":        ep.Reward(),
		"rewards":       rewards,
		"messages":      model.MessageValues(msgs),
		"tools":         tools,
		"screenshots":   shots,
		"prompt_ids":    e.PromptIDs,
		"response_ids":  e.ResponseIDs,
		"response_mask": model.Mask8(e.ResponseMask),
		"token_drift":   e.TokenDrift,
		"duration_ms":   e.DurationMS,
	}
	if len(e.ResponseLogprobs) > 0 || len(e.ResponseIDs) == 0 {
		row["response_logprobs"] = e.ResponseLogprobs
	}
	return row, nil
}

// StepRows builds ep's step rows and calls fn with each, in step order.
func StepRows(ep *model.Episode, fn func(model.Row) error) error {
	epReward := ep.Reward()
	for i := range ep.Steps {
		s := &ep.Steps[i]
		png, err := ep.Screenshot(i)
		if err != nil {
			return err
		}
		row := model.Row{
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
