package runtime

import (
	"strings"
	"time"
)

// Observation is what an action produced. A failing command is an
// Observation with Error set, never a Go error: Go errors are reserved for
// infrastructure failures (see Session).
type Observation struct {
	// Output holds the exact bytes the action produced (stdout and stderr of a
	// command, interleaved as written; the contents of a read file). It may be
	// any bytes, including invalid UTF-8; Text gives the model-facing form.
	// When Truncated, Output keeps the head and tail around an elision marker.
	Output []byte
	// OutputBytes is the size of the full output before any cap.
	OutputBytes int64
	// Truncated reports that Output was capped.
	Truncated bool

	// ExitCode is the command's exit status; -1 when the process was killed
	// (timeout) or the action is not a command.
	ExitCode int
	// Error reports that the action failed: non-zero exit, timeout, a refused
	// path, a missing file. ErrorKind says which.
	Error     bool
	ErrorKind ErrorKind
	// TimedOut reports that the per-action timeout fired and the whole process
	// tree was killed.
	TimedOut bool

	// Screenshot is an optional PNG taken after the action.
	Screenshot *Screenshot
	// AXTree is an optional accessibility tree, as compact JSON.
	AXTree string

	// Duration is the wall time the environment spent on the action.
	Duration time.Duration
}

// ErrorKind classifies a failed action.
type ErrorKind string

// The error kinds an Observation may carry.
const (
	ErrNone        ErrorKind = ""
	ErrExitStatus  ErrorKind = "exit_status"  // command exited non-zero
	ErrTimeout     ErrorKind = "timeout"      // per-action timeout fired
	ErrPathRefused ErrorKind = "path_refused" // path escapes the workspace
	ErrNotFound    ErrorKind = "not_found"    // file or resource missing
	ErrUnsupported ErrorKind = "unsupported"  // the session cannot do this kind of action
	ErrActionFail  ErrorKind = "action_failed"
)

// Text returns Output as valid UTF-8, replacing invalid sequences with U+FFFD,
// which is what a model is shown.
func (o Observation) Text() string {
	return strings.ToValidUTF8(string(o.Output), "\uFFFD")
}

// Screenshot is a PNG image and the coordinate space it was taken in.
type Screenshot struct {
	PNG           []byte
	Width, Height int // pixels; click coordinates use the same space
}

// Usage counts tokens of one model call as the server reported them.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
}

// ModelEvent is what a policy's model did to produce one decision. Every field
// is optional: a scripted policy has none, an LLM policy has what its server
// reports. Token fields hold the server's own ids, never a re-tokenization.
type ModelEvent struct {
	Model      string
	RawText    string   // the assistant text as returned
	Reasoning  string   // separate reasoning text, when the server splits it
	Actions    []Action // every action parsed from RawText / tool calls
	ToolCallID string
	// ToolCalls are the function calls the server returned, in order, as
	// the model wrote them (the first is the one that ran); empty when the
	// calls were written in RawText, which then holds them as written.
	ToolCalls    []ToolCall
	PromptIDs    []int32   // the prompt as the server tokenized it
	ResponseIDs  []int32   // tokens the model generated this turn
	ResponseMask []int8    // 1 per model token (0 marks environment tokens in assembled records)
	Logprobs     []float32 // one per ResponseIDs entry
	FinishReason string
	// PromptImages are the hex sha256 of the PNGs the prompt of this turn
	// carried, in the order they appeared in it (the screenshots still in
	// the context); with the recorded steps they rebuild the exact
	// multimodal prompt. Empty for a text-only prompt.
	PromptImages []string
	Usage        Usage
	Latency      time.Duration
	// Provenance says where the turn's token ids came from; zero for a
	// policy that reports none.
	Provenance Provenance
	// Harness is set on a model call an agent harness made (a program
	// running in the sandbox that executes its own tools and calls its
	// model through forkline's gateway): what the harness sent with it.
	// Nil for every other policy's turns.
	Harness *HarnessCall
}

// HarnessCall is what an agent harness sent with one model call, as
// forkline's gateway translated it into the canonical conversation.
type HarnessCall struct {
	// Input is what the harness added to its conversation before this
	// call, as a JSON array of chat messages ({"role", "content",
	// "reasoning", "tool_calls": [{"id", "name", "arguments"}],
	// "tool_call_id", "is_error"}): the whole conversation on the first
	// call and after a cut, else the results of the previous call's tool
	// calls and whatever the harness appended to them.
	Input string
	// Cut says why this call did not continue the previous one, "" when
	// it did (HistoryRewritten, SystemChanged, ToolsChanged).
	Cut string
	// Tools are the tools offered with the call, as a JSON array of chat
	// API tool objects ({"type": "function", "function": {...}}).
	Tools []byte
}

// Why an agent harness's call did not continue the previous one
// (HarnessCall.Cut): it rewrote or dropped earlier messages (compaction, a
// dropped turn), changed its system prompt, or changed its tools (a
// template renders them before the conversation). The token record is
// cut there, never glued.
const (
	HistoryRewritten = "history_rewritten"
	SystemChanged    = "system_changed"
	ToolsChanged     = "tools_changed"
)

// ToolCall is one function call as a model's server returned it: the
// server's call id, the function's name and its arguments exactly as sent
// (normally a JSON object encoded as a string). The canonical Action is a
// re-serialization; this is the record of what the model produced.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Provenance is how one model turn's token ids were obtained, recorded per
// step so that a run that mixes inference servers, chat templates or
// token paths shows it turn by turn.
type Provenance struct {
	// Path names how the prompt ids were made: TokenPathChat (the server
	// rendered the conversation's messages) or TokenPathTITO (the policy
	// sent the ids it held, token in, token out); "" when unknown.
	Path string
	// Endpoints are the server paths that produced the ids, in call order
	// (for example /tokenize then /v1/completions).
	Endpoints []string
	// TemplateSHA256 is the hex sha256 of the chat template the server
	// reported it renders with; "" when it reports none.
	TemplateSHA256 string
}

// The token paths of Provenance.Path.
const (
	TokenPathChat = "chat"
	TokenPathTITO = "tito"
)

// Step is one action and its result, in episode order.
type Step struct {
	Index       int
	Action      Action
	Observation Observation
	Model       *ModelEvent // nil when the policy used no model
	Started     time.Time
	PolicyTime  time.Duration // time the policy took to decide
	EnvTime     time.Duration // time the session took to act
}

// ExitReason says why an episode ended. Scaffold losses (the policy or the
// environment failed) are kept apart from the outcomes of the work itself.
type ExitReason string

// The exit reasons.
const (
	ExitDone            ExitReason = "done"             // the policy emitted done
	ExitMaxSteps        ExitReason = "max_steps"        // step budget used up
	ExitTimeout         ExitReason = "timeout"          // episode wall-clock budget used up
	ExitNoAction        ExitReason = "no_action"        // the policy answered without an action
	ExitUnparsedAction  ExitReason = "unparsed_action"  // the policy's answer held an action that did not parse
	ExitOutputTruncated ExitReason = "output_truncated" // the model hit its token limit mid-answer
	ExitPolicyError     ExitReason = "policy_error"     // the policy failed (server down after retries)
	ExitEnvError        ExitReason = "env_error"        // the sandbox failed (infrastructure, not a command)
	ExitCancelled       ExitReason = "cancelled"        // the run was stopped
	// ExitBranched: the episode was checkpointed after its last step and
	// continued in branches (forks of that checkpoint, each its own
	// episode). Its steps are the prefix its branches share; it was not
	// verified, and it is not a trajectory of its own.
	ExitBranched ExitReason = "branched"
	ExitUnknown  ExitReason = "unknown" // anything else; counts as a loss
)

// ExitReasons lists every exit reason in a stable order.
func ExitReasons() []ExitReason {
	return []ExitReason{ExitDone, ExitMaxSteps, ExitTimeout, ExitNoAction, ExitUnparsedAction,
		ExitOutputTruncated, ExitPolicyError, ExitEnvError, ExitCancelled, ExitBranched, ExitUnknown}
}

// ParseExitReason maps a string to an ExitReason; anything unrecognised is
// ExitUnknown, so it is never mistaken for a completion.
func ParseExitReason(s string) ExitReason {
	for _, r := range ExitReasons() {
		if string(r) == s {
			return r
		}
	}
	return ExitUnknown
}

// Completed reports whether the episode ended because the policy said done.
func (r ExitReason) Completed() bool { return r == ExitDone }

// ScaffoldLoss reports whether the episode was lost to the scaffold (policy,
// parser, model limits or environment) rather than ending on the episode's own
// terms. Unknown reasons count as losses.
func (r ExitReason) ScaffoldLoss() bool {
	switch r {
	case ExitDone, ExitMaxSteps, ExitTimeout, ExitCancelled, ExitBranched:
		return false
	}
	return true
}
