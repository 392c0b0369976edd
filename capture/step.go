package capture

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// Step is the inverse of Policy.Row, as far as a row keeps it: the
// runtime step a stored steps row records — its action, its observation
// (the output as captured, capped as the capture policy capped it; a
// screenshot's size and, under pixels=full, its PNG; the accessibility
// tree) and its model turn (text, reasoning, token ids, mask and logprobs,
// usage, the recorded tool calls, an agent harness's input and cut). What
// a row never holds (a hashed screenshot's PNG, a harness call's tools,
// which are a blob) is left empty. A branch re-made from a dataset continues
// from these steps (its policy rebuilds its conversation from them); an
// action_json that is not a canonical action is an error naming the step.
func Step(r schemas.StepRow) (runtime.Step, error) {
	var a runtime.Action
	if err := json.Unmarshal([]byte(r.ActionJSON), &a); err != nil {
		return runtime.Step{}, fmt.Errorf("capture: step %d: action_json: %w", r.StepIndex, err)
	}
	out := []byte(r.Output)
	if r.OutputRaw != nil {
		out = append([]byte(nil), r.OutputRaw...)
	}
	s := runtime.Step{
		Index:  int(r.StepIndex),
		Action: a,
		Observation: runtime.Observation{
			Output: out, OutputBytes: r.OutputBytes, Truncated: r.Truncated,
			ExitCode: int(r.ExitCode), Error: r.IsError, ErrorKind: runtime.ErrorKind(r.ErrorKind), TimedOut: r.TimedOut,
			AXTree: r.AXTree, Duration: time.Duration(r.EnvMS * float64(time.Millisecond)),
		},
		Started:    time.UnixMilli(r.StartedAt),
		PolicyTime: time.Duration(r.PolicyMS * float64(time.Millisecond)),
		EnvTime:    time.Duration(r.EnvMS * float64(time.Millisecond)),
	}
	if r.ScreenHash != "" {
		s.Observation.Screenshot = &runtime.Screenshot{PNG: r.Screenshot, Width: int(r.ScreenW), Height: int(r.ScreenH)}
	}
	if m := modelEvent(r, a); m != nil {
		s.Model = m
	}
	return s, nil
}

// modelEvent is the model turn a row records, nil when it records none.
func modelEvent(r schemas.StepRow, a runtime.Action) *runtime.ModelEvent {
	if r.Model == nil && r.ModelText == nil && r.Reasoning == nil && r.FinishReason == nil &&
		len(r.PromptIDs) == 0 && len(r.ResponseIDs) == 0 && r.HarnessInput == nil && r.ToolCalls == nil {
		return nil
	}
	m := &runtime.ModelEvent{
		Model: deref(r.Model), RawText: deref(r.ModelText), Reasoning: deref(r.Reasoning), FinishReason: deref(r.FinishReason),
		PromptIDs: r.PromptIDs, ResponseIDs: r.ResponseIDs, Logprobs: r.ResponseLogprobs,
	}
	if a.Kind != "" {
		m.Actions = []runtime.Action{a}
	}
	if len(r.ResponseMask) > 0 {
		m.ResponseMask = make([]int8, len(r.ResponseMask))
		for i, v := range r.ResponseMask {
			m.ResponseMask[i] = int8(v)
		}
	}
	if r.PromptTokens != nil {
		m.Usage.PromptTokens = int(*r.PromptTokens)
	}
	if r.CompletionTokens != nil {
		m.Usage.CompletionTokens = int(*r.CompletionTokens)
	}
	if r.ModelMS != nil {
		m.Latency = time.Duration(*r.ModelMS * float64(time.Millisecond))
	}
	if r.HarnessInput != nil || r.HistoryCut != nil {
		// The tools are a blob: the row names them (ToolsSHA256).
		m.Harness = &runtime.HarnessCall{Input: deref(r.HarnessInput), Cut: deref(r.HistoryCut)}
	}
	if r.ToolCalls != nil {
		var calls []runtime.ToolCall
		if json.Unmarshal([]byte(*r.ToolCalls), &calls) == nil {
			m.ToolCalls = calls
		}
	}
	return m
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
