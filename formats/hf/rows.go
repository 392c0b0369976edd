package hf

import (
	"encoding/json"
	"fmt"

	"github.com/forkline/forkline/formats/model"
)

// RowsPer says what one row of the hf and hf-disk targets is.
type RowsPer string

// The row shapes.
const (
	RowsEpisode RowsPer = "episode" // one row per episode: conversation, screenshots, token record, rewards
	RowsStep    RowsPer = "step"    // one row per step: action, observation, screenshot, step tokens, rewards
	// RowsTokens and RowsTokenTurns are the sft-tokens target's rows:
	// pre-tokenized SFT from the episode's assembled record, or per model
	// turn from that turn's ids.
	RowsTokens     RowsPer = "tokens"
	RowsTokenTurns RowsPer = "token-turns"
)

// ParseRows reads the -rows flag of hf and hf-disk.
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

// EpisodeFeatures are the columns of an episode row.
var EpisodeFeatures = model.Features{
	{Name: "episode_id", Type: str},
	{Name: "run_id", Type: str},
	{Name: "task_id", Type: str},
	{Name: "group_id", Type: str},
	{Name: "instruction", Type: str},
	{Name: "exit_reason", Type: str},
	{Name: "answer", Type: str},
	{Name: "steps", Type: i32},
	{Name: "reward", Type: f64},
	{Name: "rewards", Type: model.List{Item: model.Struct{{Name: "name", Type: str}, {Name: "step_index", Type: i32}, {Name: "value", Type: f64}}}},
	{Name: "messages", Type: model.List{Item: model.JSON{}}},
	{Name: "tools", Type: model.List{Item: model.JSON{}}},
	{Name: "screenshots", Type: model.List{Item: model.Image{}}},
	{Name: "images", Type: model.List{Item: model.Image{}}},
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
	{Name: "group_id", Type: str},
	{Name: "step_index", Type: i32},
	{Name: "instruction", Type: str},
	{Name: "screenshot_before", Type: model.Image{}},
	{Name: "action_kind", Type: str},
	{Name: "action_json", Type: str},
	{Name: "model_text", Type: str},
	{Name: "reasoning", Type: str},
	{Name: "tool_calls", Type: str},
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
	switch r {
	case RowsStep:
		return StepFeatures
	case RowsTokens, RowsTokenTurns:
		return TokenFeatures
	}
	return EpisodeFeatures
}

// ToolValues is the tools column: the episode's tools (model.Episode.Tools)
// as one JSON value per tool, in aci's key order, or nil (null) when its
// policy offered none as functions. Tool schemas differ in shape, so they
// are Json values, as TRL's documentation recommends, not a struct.
func ToolValues(ep *model.Episode) any {
	t := ep.Tools()
	if t == nil {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(t, &items); err != nil {
		panic(err) // aci.ToolsJSON is an array
	}
	out := make([]any, len(items))
	for i, it := range items {
		// Each came out of a decoded array: valid, so the table does not
		// check it again for every row it is appended to (json.Valid of
		// the tool list was a sixth of an hf export's CPU).
		out[i] = model.ValidJSON(it)
	}
	return out
}

// EpisodeRow builds ep's episode row; tools is its tools column value
// (ToolValues, which callers may cache by ep.ToolsKey()).
func EpisodeRow(ep *model.Episode, tools any, opt model.Options) (model.Row, error) {
	msgs, err := model.Messages(ep, opt)
	if err != nil {
		return nil, err
	}
	// The messages are appended to one buffer and handed out as slices of
	// it once it no longer grows: one allocation a row, not one a message.
	messages := make([]any, len(msgs))
	ends := make([]int, len(msgs))
	var buf []byte
	for i, m := range msgs {
		buf = model.AppendMessage(buf, m, opt)
		ends[i] = len(buf)
	}
	start := 0
	for i, end := range ends {
		messages[i] = model.ValidJSON(buf[start:end:end])
		start = end
	}
	// TRL's VLM format: the images the messages' {"type": "image"} parts
	// stand for, in the same order; empty for a text conversation.
	refs := model.Images(msgs)
	images := make([]any, len(refs))
	for i, im := range refs {
		png, err := ep.Image(im.SHA256)
		if err != nil {
			return nil, err
		}
		images[i] = png
	}
	// One entry per step, null for a step without a screenshot: item i is
	// step i's.
	shots := make([]any, len(ep.Steps))
	for i := range ep.Steps {
		png, err := ep.Screenshot(i)
		if err != nil {
			return nil, err
		}
		if len(png) > 0 {
			shots[i] = png
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
		"group_id":      ep.GroupID(),
		"instruction":   ep.Instruction,
		"exit_reason":   e.ExitReason,
		"answer":        e.Answer,
		"steps":         e.Steps,
		"reward":        ep.Reward(),
		"rewards":       rewards,
		"messages":      messages,
		"tools":         tools,
		"screenshots":   shots,
		"images":        images,
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
	group := ep.GroupID()
	// before is the latest screenshot the model had seen when it chose
	// step i's action: the start page's for the first step, then the one
	// the step before took (or the latest before it).
	var before []byte
	if h := ep.Row.StartScreenHash; h != nil && (len(ep.Row.StartScreenshot) > 0 || ep.Blob != nil) {
		png, err := ep.Image(*h)
		if err != nil {
			return err
		}
		before = png
	}
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
			"group_id":       group,
			"step_index":     s.StepIndex,
			"instruction":    ep.Instruction,
			"action_kind":    s.ActionKind,
			"action_json":    s.ActionJSON,
			"model_text":     s.ModelText,
			"reasoning":      s.Reasoning,
			"tool_calls":     s.ToolCalls,
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
		if len(before) > 0 {
			row["screenshot_before"] = before
		}
		if len(png) > 0 {
			before = png
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

// TokenFeatures are the columns of the sft-tokens target: TRL's
// pre-tokenized SFT (input_ids, with assistant_masks, from which TRL builds
// its labels; SFTTrainer skips its own tokenization when input_ids exists),
// and what the row comes from.
var TokenFeatures = model.Features{
	{Name: "input_ids", Type: model.List{Item: i32}},
	{Name: "assistant_masks", Type: model.List{Item: i8}},
	{Name: "episode_id", Type: str},
	{Name: "run_id", Type: str},
	{Name: "task_id", Type: str},
	{Name: "group_id", Type: str},
	{Name: "turn", Type: i32},
	{Name: "exit_reason", Type: str},
	{Name: "reward", Type: f64},
}

// Refusal reasons of sft-tokens.
const (
	RefusedNoTokens = "no token record (only a -policy openai run against a server that returns token ids, vLLM or SGLang, with capture tokens keep, has one; a script run has none)"
	RefusedDrift    = "token record cut by retokenization drift (-rows turn keeps its turns)"
)

// TokenRows calls fn with ep's sft-tokens rows: with turns false one row,
// the assembled record (the first prompt, then every later token, mask 1
// on the model's); with turns true one per model turn that carries the
// server's ids (that turn's prompt, mask 0, then its response, mask 1). It
// refuses (model.Refusal) an episode with nothing to write.
func TokenRows(ep *model.Episode, turns bool, fn func(model.Row) error) error {
	e := &ep.Row
	base := func(turn *int32) model.Row {
		return model.Row{"episode_id": e.EpisodeID, "run_id": e.RunID, "task_id": e.TaskID, "group_id": ep.GroupID(),
			"turn": turn, "exit_reason": e.ExitReason, "reward": ep.Reward()}
	}
	if !turns {
		if len(e.PromptIDs) == 0 || len(e.ResponseIDs) == 0 || e.TokenTurns == 0 {
			return &model.Refusal{Reason: RefusedNoTokens}
		}
		if e.TokenDrift {
			return &model.Refusal{Reason: RefusedDrift}
		}
		if len(e.ResponseMask) != len(e.ResponseIDs) {
			return fmt.Errorf("hf: episode %s: %d response_mask values for %d response_ids", e.EpisodeID, len(e.ResponseMask), len(e.ResponseIDs))
		}
		r := base(nil)
		r["input_ids"] = append(append([]int32{}, e.PromptIDs...), e.ResponseIDs...)
		mask := make([]int8, len(e.PromptIDs), len(e.PromptIDs)+len(e.ResponseIDs))
		r["assistant_masks"] = append(mask, model.Mask8(e.ResponseMask)...)
		return fn(r)
	}
	var n int32
	for i := range ep.Steps {
		s := &ep.Steps[i]
		if len(s.PromptIDs) == 0 || len(s.ResponseIDs) == 0 {
			continue
		}
		turn := n
		n++
		r := base(&turn)
		r["input_ids"] = append(append([]int32{}, s.PromptIDs...), s.ResponseIDs...)
		mask := make([]int8, len(s.PromptIDs)+len(s.ResponseIDs))
		for j := len(s.PromptIDs); j < len(mask); j++ {
			mask[j] = 1
		}
		r["assistant_masks"] = mask
		if err := fn(r); err != nil {
			return err
		}
	}
	if n == 0 {
		return &model.Refusal{Reason: RefusedNoTokens}
	}
	return nil
}
