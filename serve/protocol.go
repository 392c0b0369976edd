package serve

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/runtime"
)

// The OpenEnv wire protocol, as its server (openenv.core.env_server:
// http_server.py, types.py) and client (env_client.py) have it:
//
//	client → server   {"type": "reset", "data": {seed?, episode_id?, ...}}
//	                  {"type": "step",  "data": ACTION}
//	                  {"type": "state"}
//	                  {"type": "close"}
//	server → client   {"type": "observation", "data": {"observation": {...}, "reward": R|null, "done": B}}
//	                  {"type": "state", "data": {"episode_id": ..., "step_count": N, ...}}
//	                  {"type": "error", "data": {"message": ..., "code": CODE}}
//
// A step's data is the action itself (OpenEnv's Action model: its fields and
// a "metadata" object), not an envelope. Here an action is a canonical
// forkline action ({"kind": ..., fields}) whose metadata may carry the model
// turn that chose it (token ids, text).

// Message types.
const (
	msgReset       = "reset"
	msgStep        = "step"
	msgState       = "state"
	msgClose       = "close"
	msgObservation = "observation"
	msgError       = "error"

	// forkline's branching extension (docs/serve.md#branching-over-the-wire):
	// a stock OpenEnv client never sends these, and never gets their
	// answers.
	msgCheckpoint = "checkpoint" // client → server, and its answer
	msgRelease    = "release"    // client → server
	msgReleased   = "released"   // its answer
)

// Error codes, OpenEnv's WSErrorCode values: a client written for OpenEnv
// knows them all.
const (
	codeInvalidJSON     = "INVALID_JSON"
	codeUnknownType     = "UNKNOWN_TYPE"
	codeValidation      = "VALIDATION_ERROR"
	codeExecution       = "EXECUTION_ERROR"
	codeCapacityReached = "CAPACITY_REACHED"
	codeFactory         = "FACTORY_ERROR"
	codeSession         = "SESSION_ERROR"

	// The branching extension's own codes: only a client that sends its
	// messages (or a reset from_checkpoint) gets them.
	codeCheckpointNotFound = "CHECKPOINT_NOT_FOUND" // an id that is unknown, released, or whose owner session closed
	codeCheckpointLimit    = "CHECKPOINT_LIMIT"     // -session-checkpoints or -max-checkpoints are live
)

// clientMessage is one message a client sends over /ws.
type clientMessage struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// serverMessage is one message the server sends over /ws.
type serverMessage struct {
	Type string `json:"type"`
	Data any    `json:"data"`
}

// wireError is the data of an error message: OpenEnv's message and code,
// and what a client can act on.
type wireError struct {
	Message string `json:"message"`
	Code    string `json:"code"`
	// ActiveSessions and MaxSessions come with CAPACITY_REACHED, as in
	// OpenEnv.
	ActiveSessions *int `json:"active_sessions,omitempty"`
	MaxSessions    *int `json:"max_sessions,omitempty"`
}

// protocolError is an error with the code it is answered with.
type protocolError struct {
	code string
	msg  string
}

func (e *protocolError) Error() string { return e.msg }

func refuse(code, format string, args ...any) *protocolError {
	return &protocolError{code: code, msg: fmt.Sprintf(format, args...)}
}

// wireErrorOf is err as the client sees it; an error without a code is an
// EXECUTION_ERROR, as OpenEnv answers an exception.
func wireErrorOf(err error) wireError {
	var pe *protocolError
	if errors.As(err, &pe) {
		return wireError{Message: pe.msg, Code: pe.code}
	}
	return wireError{Message: err.Error(), Code: codeExecution}
}

// StepResult is the data of an observation message and the body of the
// HTTP /reset and /step answers: OpenEnv's {observation, reward, done}.
type StepResult struct {
	Observation Observation `json:"observation"`
	// Reward is the verifier's reward once the episode is done (nil when
	// the task has none or the verifier produced no number), and nil
	// before: forkline's rewards are the episode's, computed at its end.
	Reward *Reward `json:"reward"`
	Done   bool    `json:"done"`
}

// Reward is a reward on the wire: always a JSON float (0.0, 1.0, 0.5),
// never an integer literal, as OpenEnv types rewards (Optional[float]) and
// its server writes them (Python's json writes 1.0 for a float). A trainer
// that stacks a batch of rewards decoded from 0 and 1 would get an integer
// tensor.
type Reward float64

// MarshalJSON writes r as encoding/json writes a float64, with ".0" added
// when that has neither a fraction nor an exponent.
func (r Reward) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(float64(r))
	if err != nil {
		return nil, err
	}
	if !bytes.ContainsAny(b, ".eE") {
		b = append(b, ".0"...)
	}
	return b, nil
}

// rewardOf is v on the wire.
func rewardOf(v *float64) *Reward {
	if v == nil {
		return nil
	}
	r := Reward(*v)
	return &r
}

// Observation is what the client is shown after a reset or a step. Text
// is the model-facing rendering forkline's own policies show a model
// (aci.ObservationText; the instruction at reset), so a trainer that
// prompts with it trains on what collect records; the other fields are the
// observation's parts, as the steps table keeps them.
type Observation struct {
	EpisodeID string `json:"episode_id"`
	TaskID    string `json:"task_id"`
	// Step is how many steps the episode has taken: 0 after the reset.
	Step int `json:"step"`
	// Instruction is the task's instruction, at reset only.
	Instruction string `json:"instruction,omitempty"`
	Text        string `json:"text"`

	Output      string      `json:"output"`
	OutputBytes int64       `json:"output_bytes"`
	Truncated   bool        `json:"truncated"`
	ExitCode    int         `json:"exit_code"`
	Error       bool        `json:"error"`
	ErrorKind   string      `json:"error_kind"`
	TimedOut    bool        `json:"timed_out"`
	Screenshot  *Screenshot `json:"screenshot,omitempty"`
	A11yTree    string      `json:"a11y_tree,omitempty"`

	// ParentEpisodeID, BranchIndex and GroupID are set on the reset of a
	// branch (from_checkpoint): the episode it continues, its index among
	// that checkpoint's branches, the group the siblings share. Step is
	// then the branch step: the steps it inherits.
	ParentEpisodeID string `json:"parent_episode_id,omitempty"`
	BranchIndex     *int   `json:"branch_index,omitempty"`
	GroupID         string `json:"group_id,omitempty"`

	// ActionTaken is set on a step's reply: false when the step came after
	// the episode had ended (its timeout passed while the client was
	// deciding), and the reply then only says how it ended.
	ActionTaken *bool `json:"action_taken,omitempty"`
	// ExitReason, Detail and Answer say how the episode ended, once done;
	// RewardDetail is the verifier's output tail or why it gave no reward.
	ExitReason   string `json:"exit_reason,omitempty"`
	Detail       string `json:"detail,omitempty"`
	Answer       string `json:"answer,omitempty"`
	RewardDetail string `json:"reward_detail,omitempty"`
}

// Screenshot is a screenshot the action produced, as base64 PNG.
type Screenshot struct {
	PNGBase64 string `json:"png_base64"`
	Width     int    `json:"width"`
	Height    int    `json:"height"`
}

// State is the data of a state message and the HTTP /state answer:
// OpenEnv's State (episode_id, step_count) and the episode's standing.
type State struct {
	EpisodeID  *string `json:"episode_id"`
	StepCount  int     `json:"step_count"`
	TaskID     string  `json:"task_id,omitempty"`
	Done       bool    `json:"done"`
	ExitReason string  `json:"exit_reason,omitempty"`
	Reward     *Reward `json:"reward,omitempty"`
	// Checkpoints are the checkpoints the session holds (the branching
	// extension).
	Checkpoints []string `json:"checkpoints,omitempty"`
}

// observationOf is the client's view of a step.
func observationOf(episodeID, taskID string, s runtime.Step) Observation {
	o := s.Observation
	obs := Observation{
		EpisodeID: episodeID, TaskID: taskID, Step: s.Index + 1, Text: aci.ObservationText(s, 0),
		Output: o.Text(), OutputBytes: o.OutputBytes, Truncated: o.Truncated, ExitCode: o.ExitCode,
		Error: o.Error, ErrorKind: string(o.ErrorKind), TimedOut: o.TimedOut, A11yTree: o.AXTree, ActionTaken: &yes,
	}
	if sc := o.Screenshot; sc != nil {
		obs.Screenshot = &Screenshot{PNGBase64: base64.StdEncoding.EncodeToString(sc.PNG), Width: sc.Width, Height: sc.Height}
	}
	return obs
}

var yes, no = true, false

// resetRequest is a reset's data: OpenEnv's seed and episode_id, and
// forkline's task_id. Any other key is dropped, as OpenEnv's server drops
// what an environment's reset does not take (ResetRequest is
// extra="allow"; http_server.py's _get_valid_kwargs filters by the reset's
// signature); the server logs the keys it dropped, once per session
// (keyLog), since a misspelt task_id now starts another task.
type resetRequest struct {
	Seed      *int64  `json:"seed"`
	EpisodeID *string `json:"episode_id"`
	TaskID    *string `json:"task_id"`
	// FromCheckpoint (the branching extension) makes the episode a branch
	// of the checkpoint's episode: a fork of its sandbox at the checkpoint,
	// continuing its history. The checkpoint names the task.
	FromCheckpoint *string `json:"from_checkpoint"`
}

// resetKeys are the keys a reset accepts.
var resetKeys = []string{"episode_id", "from_checkpoint", "seed", "task_id"}

// maxEpisodeID is OpenEnv's bound on episode_id (ResetRequest).
const maxEpisodeID = 255

// parseReset reads a reset's data (empty or null: no parameters). ignored
// are the keys it dropped (sorted).
func parseReset(data []byte) (r resetRequest, ignored []string, err error) {
	fields, err := objectFields(data, "reset data")
	if err != nil {
		return r, nil, err
	}
	ignored = dropUnknown(fields, resetKeys)
	if err := decodeFields(fields, &r); err != nil {
		return r, nil, refuse(codeValidation, "serve: reset: %v", err)
	}
	return r, ignored, checkReset(r)
}

func checkReset(r resetRequest) error {
	if r.FromCheckpoint != nil && (r.TaskID != nil || r.Seed != nil) {
		return refuse(codeValidation, "serve: reset: from_checkpoint names the task and the seed (its episode's): task_id and seed do not go with it")
	}
	if r.Seed != nil && *r.Seed < 0 {
		return refuse(codeValidation, "serve: reset: seed %d: want an integer >= 0", *r.Seed)
	}
	if r.EpisodeID != nil {
		id := *r.EpisodeID
		switch {
		case strings.TrimSpace(id) == "":
			return refuse(codeValidation, "serve: reset: episode_id is empty")
		case len(id) > maxEpisodeID:
			return refuse(codeValidation, "serve: reset: episode_id is %d bytes long (at most %d)", len(id), maxEpisodeID)
		case strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			return refuse(codeValidation, "serve: reset: episode_id %q holds control characters", id)
		}
	}
	return nil
}

// parseAction reads a step's action: a canonical action and, optionally,
// its metadata (the model turn that chose it). A malformed one is refused
// before it reaches the episode, which it leaves as it was.
func parseAction(data []byte) (runtime.Decision, error) {
	fields, err := objectFields(data, "action")
	if err != nil {
		return runtime.Decision{}, err
	}
	meta, hasMeta := fields["metadata"]
	delete(fields, "metadata")
	raw, _ := json.Marshal(fields)
	var a runtime.Action
	if err := json.Unmarshal(raw, &a); err != nil {
		return runtime.Decision{}, refuse(codeValidation, "serve: step: %v", err)
	}
	if err := a.Validate(); err != nil {
		return runtime.Decision{}, refuse(codeValidation, "serve: step: %v", err)
	}
	dec := runtime.Decision{Action: a}
	if hasMeta {
		if dec.Model, err = parseMetadata(meta); err != nil {
			return runtime.Decision{}, err
		}
	}
	return dec, nil
}

// actionMetadata is what a client may tell of the model turn that chose
// an action, to keep a token-exact record: the server's own token ids
// (prompt and generated), their logprobs, and the turn's text.
type actionMetadata struct {
	Model            string    `json:"model"`
	Text             string    `json:"text"`
	Reasoning        string    `json:"reasoning"`
	ToolCallID       string    `json:"tool_call_id"`
	FinishReason     string    `json:"finish_reason"`
	PromptIDs        []int64   `json:"prompt_ids"`
	ResponseIDs      []int64   `json:"response_ids"`
	Logprobs         []float64 `json:"logprobs"`
	PromptTokens     *int64    `json:"prompt_tokens"`
	CompletionTokens *int64    `json:"completion_tokens"`
}

var metadataKeys = []string{"completion_tokens", "finish_reason", "logprobs", "model", "prompt_ids", "prompt_tokens",
	"reasoning", "response_ids", "text", "tool_call_id"}

// parseMetadata reads an action's metadata into the model turn it
// describes; nil when it says nothing. Unknown keys are refused by name:
// a misspelt response_ids must not silently drop a token record.
func parseMetadata(data []byte) (*runtime.ModelEvent, error) {
	fields, err := objectFields(data, "action metadata")
	if err != nil {
		return nil, err
	}
	if err := onlyKeys(fields, metadataKeys, "action metadata"); err != nil {
		return nil, err
	}
	var m actionMetadata
	if err := decodeFields(fields, &m); err != nil {
		return nil, refuse(codeValidation, "serve: step: action metadata: %v", err)
	}
	if len(m.Logprobs) > 0 && len(m.Logprobs) != len(m.ResponseIDs) {
		return nil, refuse(codeValidation, "serve: step: action metadata: %d logprobs for %d response_ids (want one per id)",
			len(m.Logprobs), len(m.ResponseIDs))
	}
	ev := &runtime.ModelEvent{Model: m.Model, RawText: m.Text, Reasoning: m.Reasoning, ToolCallID: m.ToolCallID, FinishReason: m.FinishReason}
	if ev.PromptIDs, err = tokenIDs(m.PromptIDs, "prompt_ids"); err != nil {
		return nil, err
	}
	if ev.ResponseIDs, err = tokenIDs(m.ResponseIDs, "response_ids"); err != nil {
		return nil, err
	}
	if len(ev.ResponseIDs) > 0 {
		// Every generated token is the model's: the mask the steps table
		// keeps beside the ids (environment tokens are 0 only in the
		// assembled episode record).
		ev.ResponseMask = slices.Repeat([]int8{1}, len(ev.ResponseIDs))
	}
	for i, lp := range m.Logprobs {
		if math.IsNaN(lp) || math.IsInf(lp, 1) || lp > 0 {
			return nil, refuse(codeValidation, "serve: step: action metadata: logprobs[%d] = %v: want a finite number <= 0", i, lp)
		}
		ev.Logprobs = append(ev.Logprobs, float32(max(lp, -math.MaxFloat32)))
	}
	for _, c := range []struct {
		v    *int64
		name string
		dst  *int
	}{{m.PromptTokens, "prompt_tokens", &ev.Usage.PromptTokens}, {m.CompletionTokens, "completion_tokens", &ev.Usage.CompletionTokens}} {
		if c.v == nil {
			continue
		}
		if *c.v < 0 || *c.v > math.MaxInt32 {
			return nil, refuse(codeValidation, "serve: step: action metadata: %s %d out of range", c.name, *c.v)
		}
		*c.dst = int(*c.v)
	}
	if ev.Model == "" && ev.RawText == "" && ev.Reasoning == "" && ev.ToolCallID == "" &&
		ev.FinishReason == "" && len(ev.PromptIDs) == 0 && len(ev.ResponseIDs) == 0 && ev.Usage == (runtime.Usage{}) {
		return nil, nil
	}
	return ev, nil
}

// tokenIDs checks that ids are token ids (0 ≤ id < 2^31).
func tokenIDs(ids []int64, name string) ([]int32, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id > math.MaxInt32 {
			return nil, refuse(codeValidation, "serve: step: action metadata: %s[%d] = %d is not a token id", name, i, id)
		}
		out[i] = int32(id)
	}
	return out, nil
}

// objectFields reads data as a JSON object; empty data or null is an
// empty one.
func objectFields(data []byte, what string) (map[string]json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(data)) == 0 || string(bytes.TrimSpace(data)) == "null" {
		return fields, nil
	}
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, refuse(codeValidation, "serve: %s must be a JSON object: %v", what, err)
	}
	return fields, nil
}

// onlyKeys refuses a key outside known, naming it and the known ones.
func onlyKeys(fields map[string]json.RawMessage, known []string, what string) error {
	var unknown []string
	for k := range fields {
		if !slices.Contains(known, k) {
			unknown = append(unknown, fmt.Sprintf("%q", k))
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return refuse(codeValidation, "serve: %s: unknown key %s (known: %s)", what, strings.Join(unknown, ", "), strings.Join(known, ", "))
}

// dropUnknown removes the keys outside known from fields and returns them,
// sorted: the request envelope's extra keys, which OpenEnv's server
// accepts and does not pass on.
func dropUnknown(fields map[string]json.RawMessage, known []string) []string {
	var dropped []string
	for k := range fields {
		if !slices.Contains(known, k) {
			dropped = append(dropped, k)
			delete(fields, k)
		}
	}
	sort.Strings(dropped)
	return dropped
}

// decodeFields decodes fields into v, a struct with their keys.
func decodeFields(fields map[string]json.RawMessage, v any) error {
	raw, _ := json.Marshal(fields)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && err != io.EOF {
		return err
	}
	return nil
}

// parseClientMessage reads one /ws message: a JSON object with a type and,
// for reset and step, data. Like OpenEnv's message models it takes no
// other keys.
func parseClientMessage(raw []byte) (clientMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return clientMessage{}, refuse(codeInvalidJSON, "serve: invalid JSON: %v", err)
	}
	var m clientMessage
	if t, ok := fields["type"]; ok {
		if err := json.Unmarshal(t, &m.Type); err != nil {
			return clientMessage{}, refuse(codeValidation, "serve: message type must be a string: %v", err)
		}
	}
	switch m.Type {
	case msgReset, msgStep:
		if err := onlyKeys(fields, []string{"data", "type"}, m.Type+" message"); err != nil {
			return clientMessage{}, err
		}
		m.Data = fields["data"]
		if m.Type == msgStep && len(m.Data) == 0 {
			return clientMessage{}, refuse(codeValidation, "serve: a step message needs data: the action")
		}
	case msgState, msgClose, msgCheckpoint:
		if err := onlyKeys(fields, []string{"type"}, m.Type+" message"); err != nil {
			return clientMessage{}, err
		}
	case msgRelease:
		if err := onlyKeys(fields, []string{"data", "type"}, m.Type+" message"); err != nil {
			return clientMessage{}, err
		}
		m.Data = fields["data"]
	default:
		return clientMessage{}, refuse(codeUnknownType, "serve: unknown message type %q (known: checkpoint, close, release, reset, state, step)", m.Type)
	}
	return m, nil
}
