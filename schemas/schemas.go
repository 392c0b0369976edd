// Package schemas owns forkline's native, versioned dataset tables: the row
// types of the steps, episodes, rewards and blobs tables, their Parquet
// schemas, and the schema version written into every file and manifest.
// docs/SCHEMA.md documents every column; a test keeps the two in step.
//
// It knows column layouts only. It does not know how rows are produced
// (capture), where files go (formats/shard), or what trainers want
// (formats/model and the formats/ targets).
package schemas

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
)

// Version is the native schema version. It is bumped whenever a column is
// added, removed or changes meaning; readers refuse versions they do not know.
//
// Version 2 added the steps table's tool_calls and token provenance
// (token_path, token_endpoints, chat_template_sha256), the episodes table's
// token_cut, metadata and lineage columns (parent_episode_id, branch_step,
// branch_index, group_id) and first observation (start_output,
// start_screenshot and its hash and size, start_a11y_tree), the steps'
// prompt_images, let a branch episode's step indexes start at its
// branch_step, and let the rewards table's name hold a verifier's metric
// names.
//
// Version 3 added the record of agent harness episodes: the steps table's
// harness_input, history_cut and tools_sha256, the episodes table's agent,
// and the token_cut values of a harness's cut history.
const Version = 3

// ReadableVersions are the schema versions this build reads: a version-2
// dataset reads as version 3 with the columns it lacks null. Writers write
// Version only, so a run is resumed by a build of its own version.
var ReadableVersions = []int{2, 3}

// Readable reports whether this build reads schema version v.
func Readable(v int) bool {
	for _, r := range ReadableVersions {
		if r == v {
			return true
		}
	}
	return false
}

// Parquet key/value metadata keys written into every shard.
const (
	MetaSchemaVersion = "forkline.schema_version"
	MetaTable         = "forkline.table"
	MetaRunID         = "forkline.run_id"
)

// Table names; they are also the directory names in a dataset.
const (
	TableSteps    = "steps"
	TableEpisodes = "episodes"
	TableRewards  = "rewards"
	TableBlobs    = "blobs"
)

// Tables lists the tables in commit order.
var Tables = []string{TableSteps, TableEpisodes, TableRewards, TableBlobs}

// StepRow is one row of the steps table: one action and what it produced.
type StepRow struct {
	EpisodeID string `parquet:"episode_id" json:"episode_id"`
	StepIndex int32  `parquet:"step_index" json:"step_index"`
	TaskID    string `parquet:"task_id" json:"task_id"`
	StartedAt int64  `parquet:"started_at_ms" json:"started_at_ms"` // unix milliseconds

	ActionKind string `parquet:"action_kind" json:"action_kind"` // "" when the model turn produced no action
	ActionJSON string `parquet:"action_json" json:"action_json"` // canonical runtime.Action JSON, "null" when none

	Output      string  `parquet:"output" json:"output"`                                          // valid UTF-8 (invalid bytes → U+FFFD), capped per capture policy
	OutputRaw   []byte  `parquet:"output_raw,optional" json:"output_raw,omitempty"`               // exact bytes, only when the output was not valid UTF-8
	OutputBytes int64   `parquet:"output_bytes" json:"output_bytes"`                              // size before any cap
	Truncated   bool    `parquet:"truncated" json:"truncated"`                                    // output was capped (by the sandbox or the capture policy)
	ExitCode    int32   `parquet:"exit_code" json:"exit_code"`                                    // -1 when killed or not a command
	IsError     bool    `parquet:"is_error" json:"is_error"`                                      // the action failed
	ErrorKind   string  `parquet:"error_kind" json:"error_kind"`                                  // runtime.ErrorKind, "" when none
	TimedOut    bool    `parquet:"timed_out" json:"timed_out"`                                    // per-action timeout fired
	Screenshot  []byte  `parquet:"screenshot,optional" json:"screenshot,omitempty"`               // PNG, when pixels=full
	ScreenHash  string  `parquet:"screenshot_sha256,optional" json:"screenshot_sha256,omitempty"` // hex sha256 of the PNG, when any screenshot was taken
	ScreenW     int32   `parquet:"screenshot_width,optional" json:"screenshot_width,omitempty"`   // pixels
	ScreenH     int32   `parquet:"screenshot_height,optional" json:"screenshot_height,omitempty"` // pixels
	AXTree      string  `parquet:"a11y_tree,optional" json:"a11y_tree,omitempty"`                 // compact JSON accessibility tree
	PolicyMS    float64 `parquet:"policy_ms" json:"policy_ms"`                                    // time the policy took to decide
	EnvMS       float64 `parquet:"env_ms" json:"env_ms"`                                          // time the environment took to act

	Model     *string `parquet:"model,optional" json:"model,omitempty"`
	ModelText *string `parquet:"model_text,optional" json:"model_text,omitempty"` // raw assistant text
	Reasoning *string `parquet:"reasoning,optional" json:"reasoning,omitempty"`
	// ToolCalls is the function calls the model's server returned this
	// turn, as JSON: [{"id", "name", "arguments"}] with arguments the text
	// the server sent (runtime.ToolCall). Null when the model wrote its
	// calls in model_text, or made none.
	ToolCalls        *string   `parquet:"tool_calls,optional" json:"tool_calls,omitempty"`
	FinishReason     *string   `parquet:"finish_reason,optional" json:"finish_reason,omitempty"`
	PromptIDs        []int32   `parquet:"prompt_ids,list" json:"prompt_ids"`
	ResponseIDs      []int32   `parquet:"response_ids,list" json:"response_ids"`
	ResponseMask     []int32   `parquet:"response_mask,list" json:"response_mask"`
	ResponseLogprobs []float32 `parquet:"response_logprobs,list" json:"response_logprobs"`
	PromptTokens     *int32    `parquet:"prompt_tokens,optional" json:"prompt_tokens,omitempty"`
	CompletionTokens *int32    `parquet:"completion_tokens,optional" json:"completion_tokens,omitempty"`
	ModelMS          *float64  `parquet:"model_latency_ms,optional" json:"model_latency_ms,omitempty"`

	// Where the turn's token ids came from (runtime.Provenance); null on a
	// step without a model turn or from a policy that reports none.
	TokenPath          *string `parquet:"token_path,optional" json:"token_path,omitempty"`                     // "chat" or "tito"
	TokenEndpoints     *string `parquet:"token_endpoints,optional" json:"token_endpoints,omitempty"`           // server paths, comma-separated, in call order
	ChatTemplateSHA256 *string `parquet:"chat_template_sha256,optional" json:"chat_template_sha256,omitempty"` // when the server reports its template

	// PromptImages are the hex sha256 of the screenshots the turn's prompt
	// carried, in prompt order (runtime.ModelEvent.PromptImages): each
	// names a step's screenshot_sha256 or the episode's
	// start_screenshot_sha256. Empty for a text-only prompt.
	PromptImages []string `parquet:"prompt_images,list" json:"prompt_images"`

	// An agent harness's model call (runtime.HarnessCall), null on every
	// other step. Added in schema version 3.
	//
	// HarnessInput is what the harness added to its conversation before
	// the call, as a JSON array of chat messages: the whole conversation
	// on the first call and after a cut, else the previous call's tool
	// results and whatever followed them.
	HarnessInput *string `parquet:"harness_input,optional" json:"harness_input,omitempty"`
	// HistoryCut says why the call did not continue the previous one
	// (runtime.HistoryRewritten, SystemChanged, ToolsChanged).
	HistoryCut *string `parquet:"history_cut,optional" json:"history_cut,omitempty"`
	// ToolsSHA256 names the blob holding the tools offered with the call
	// (a JSON array of chat API tool objects), stored once per content.
	ToolsSHA256 *string `parquet:"tools_sha256,optional" json:"tools_sha256,omitempty"`
}

// EpisodeRow is one row of the episodes table.
type EpisodeRow struct {
	EpisodeID string `parquet:"episode_id" json:"episode_id"`
	RunID     string `parquet:"run_id" json:"run_id"`
	TaskID    string `parquet:"task_id" json:"task_id"`
	TaskHash  string `parquet:"task_hash" json:"task_hash"` // sha256 of the canonical task spec
	Repeat    int32  `parquet:"repeat" json:"repeat"`
	Seed      int64  `parquet:"seed" json:"seed"`
	Replica   int32  `parquet:"replica" json:"replica"` // worker slot that ran it
	Attempt   int32  `parquet:"attempt" json:"attempt"` // 1 + number of replaced replicas before this one

	Provider      string  `parquet:"provider" json:"provider"`
	GoldenID      string  `parquet:"golden_id" json:"golden_id"`           // checkpoint id; "" for recreate
	ResetStrategy string  `parquet:"reset_strategy" json:"reset_strategy"` // fork | recreate
	ResetOrigin   string  `parquet:"reset_origin" json:"reset_origin"`     // how the sandbox was made: overlay, copy, image, create
	ResetMS       float64 `parquet:"reset_ms" json:"reset_ms"`             // fork/recreate + start commands
	GoldenBuildMS float64 `parquet:"golden_build_ms" json:"golden_build_ms"`
	GoldenBytes   int64   `parquet:"golden_bytes" json:"golden_bytes"`

	ExitReason string  `parquet:"exit_reason" json:"exit_reason"` // runtime.ExitReason
	Detail     string  `parquet:"detail" json:"detail"`           // what went wrong, when something did
	Answer     string  `parquet:"answer" json:"answer"`           // the done action's answer
	Steps      int32   `parquet:"steps" json:"steps"`
	StartedAt  int64   `parquet:"started_at_ms" json:"started_at_ms"`
	DurationMS float64 `parquet:"duration_ms" json:"duration_ms"`
	PolicyMS   float64 `parquet:"policy_ms" json:"policy_ms"`
	EnvMS      float64 `parquet:"env_ms" json:"env_ms"`
	VerifyMS   float64 `parquet:"verify_ms" json:"verify_ms"`

	TokenDrift bool `parquet:"token_drift" json:"token_drift"` // the token record is cut (TokenCut says why)
	// TokenCut says why the record was cut when TokenDrift is set:
	// TokenCutDrift or TokenCutMissingIDs; null when it was not.
	TokenCut *string `parquet:"token_cut,optional" json:"token_cut,omitempty"`

	// The episode's assembled token record (package tokens): the first model
	// prompt, then every later token with mask 1 (model) or 0 (environment)
	// and logprobs aligned (0.0 for environment tokens). Empty when the policy
	// reported no token ids or the capture policy dropped tokens; cut at the
	// drift turn when TokenDrift is set.
	PromptIDs        []int32   `parquet:"prompt_ids,list" json:"prompt_ids"`
	ResponseIDs      []int32   `parquet:"response_ids,list" json:"response_ids"`
	ResponseMask     []int32   `parquet:"response_mask,list" json:"response_mask"`
	ResponseLogprobs []float32 `parquet:"response_logprobs,list" json:"response_logprobs"`
	TokenTurns       int32     `parquet:"token_turns" json:"token_turns"` // model turns in the token record

	// The first observation (runtime.History.Start): what a GUI episode's
	// start page showed before the first action, kept under the capture
	// policy as a step's observation is. Null for an episode whose
	// environment shows nothing before it is acted on (a shell).
	StartOutput     *string `parquet:"start_output,optional" json:"start_output,omitempty"`                       // url and title, as the model saw them
	StartScreenshot []byte  `parquet:"start_screenshot,optional" json:"start_screenshot,omitempty"`               // PNG, when pixels=full
	StartScreenHash *string `parquet:"start_screenshot_sha256,optional" json:"start_screenshot_sha256,omitempty"` // hex sha256 of the PNG
	StartScreenW    int32   `parquet:"start_screenshot_width,optional" json:"start_screenshot_width,omitempty"`   // pixels
	StartScreenH    int32   `parquet:"start_screenshot_height,optional" json:"start_screenshot_height,omitempty"` // pixels
	StartAXTree     *string `parquet:"start_a11y_tree,optional" json:"start_a11y_tree,omitempty"`                 // compact JSON accessibility tree
	// Metadata is the task's free-form metadata (its metadata: section, or
	// a Harbor task.toml's [metadata] and [task]) as a JSON object; null for
	// a task without any. Added in schema version 2.
	Metadata *string `parquet:"metadata,optional" json:"metadata,omitempty"`
	// Lineage. A root episode starts from its task's golden checkpoint:
	// ParentEpisodeID, BranchStep and BranchIndex are null. A branch
	// episode starts from a checkpoint of its parent taken after the
	// parent's last step: its own steps are numbered from BranchStep on,
	// and steps 0..BranchStep-1 are the prefix, stored once, in its
	// ancestors (formats/shard's EachTrajectory joins them). Its id derives
	// from the parent's id, BranchStep and BranchIndex.
	ParentEpisodeID *string `parquet:"parent_episode_id,optional" json:"parent_episode_id,omitempty"`
	BranchStep      *int32  `parquet:"branch_step,optional" json:"branch_step,omitempty"`   // steps inherited from the parent
	BranchIndex     *int32  `parquet:"branch_index,optional" json:"branch_index,omitempty"` // 0..width-1 among its siblings
	// GroupID names the episodes that share a prefix and differ after it:
	// siblings of one branch point share their group (derived from the
	// parent's id and the branch step); root episodes share theirs with
	// every episode of the same task spec started from its golden (derived
	// from task id and task hash). Null in rows that predate it.
	GroupID *string `parquet:"group_id,optional" json:"group_id,omitempty"`
	// Agent is the record of an episode an agent harness ran (AgentRecord
	// as JSON); null for every other policy's. Added in schema version 3.
	Agent *string `parquet:"agent,optional" json:"agent,omitempty"`
}

// Branched reports whether the episode is a branch of another (it has a
// parent), and at which step it starts.
func (r *EpisodeRow) Branched() (parent string, step int, ok bool) {
	if r.ParentEpisodeID == nil || *r.ParentEpisodeID == "" {
		return "", 0, false
	}
	if r.BranchStep != nil {
		step = int(*r.BranchStep)
	}
	return *r.ParentEpisodeID, step, true
}

// FirstStep is the step index the episode's own steps start at: its
// branch step for a branch episode, 0 for a root.
func (r *EpisodeRow) FirstStep() int {
	_, step, _ := r.Branched()
	return step
}

// The values of EpisodeRow.TokenCut.
const (
	// TokenCutDrift: a later prompt did not extend the earlier prompt and
	// response ids (the chat template re-rendered history differently).
	TokenCutDrift = "drift"
	// TokenCutMissingIDs: a model turn came back without token ids, so what
	// the model generated there is unknown and no later turn can be masked.
	TokenCutMissingIDs = "missing_ids"
	// An agent harness's call did not continue the one before (its
	// HistoryCut): it rewrote its history, changed its system prompt, or
	// changed its tools. The record holds the turns before that call.
	TokenCutHistoryRewritten = "history_rewritten"
	TokenCutSystemChanged    = "system_changed"
	TokenCutToolsChanged     = "tools_changed"
)

// AgentRecord is the episodes table's agent column: how an agent harness
// ran the episode. Blobs it names are in the blobs table.
type AgentRecord struct {
	// Harness is claude-code, codex, opencode or command; Package and
	// Version the npm package it was installed from ("" for command).
	Harness string `json:"harness"`
	Package string `json:"package,omitempty"`
	Version string `json:"version,omitempty"`
	// API is the API its model calls came in (anthropic-messages,
	// openai-responses, openai-chat); "" when it made none.
	API string `json:"api,omitempty"`
	// ExitCode is the harness's exit status; -1 when it was killed (at the
	// episode's time limit, or after its step limit) or never reported.
	ExitCode int `json:"exit_code"`
	// LogSHA256 names the blob of its stdout and stderr (interleaved,
	// capped as a command's output is); LogBytes is their size before the
	// cap.
	LogSHA256 string `json:"log_sha256,omitempty"`
	LogBytes  int64  `json:"log_bytes"`
	// Calls are the model calls of its trajectory (the steps); SideCalls
	// the others (a title, a summary, a sub-agent), kept out of the steps
	// and of every export, each a line of the JSONL blob SideCallsSHA256.
	Calls           int    `json:"calls"`
	SideCalls       int    `json:"side_calls"`
	SideCallsSHA256 string `json:"side_calls_sha256,omitempty"`
	// Dropped are the tools the harness offered that the model was not
	// offered (hosted tools, deferred ones, kinds a chat model cannot
	// call), each "NAME (why)".
	Dropped []string `json:"dropped_tools,omitempty"`
	// Refused are the harness's requests the gateway refused, each why.
	Refused []string `json:"refused,omitempty"`
}

// RewardRow is one row of the rewards table: a reward attached out-of-band to
// an episode (StepIndex nil) or to one of its steps.
type RewardRow struct {
	EpisodeID string   `parquet:"episode_id" json:"episode_id"`
	StepIndex *int32   `parquet:"step_index,optional" json:"step_index,omitempty"`
	Name      string   `parquet:"name" json:"name"`                      // e.g. "verify"
	Value     *float64 `parquet:"value,optional" json:"value,omitempty"` // nil when the verifier could not produce one
	Source    string   `parquet:"source" json:"source"`                  // what produced it, e.g. the verify command
	Detail    string   `parquet:"detail" json:"detail"`                  // verifier output tail or error
	ExitCode  int32    `parquet:"exit_code" json:"exit_code"`
}

// BlobRow is one row of the blobs table: a content-addressed payload.
type BlobRow struct {
	SHA256 string `parquet:"sha256" json:"sha256"`
	Media  string `parquet:"media_type" json:"media_type"`
	Data   []byte `parquet:"data" json:"data"`
}

// The media types of blobs besides screenshots (image/png): an agent
// harness's tool lists (MediaJSON), its output (MediaText) and its side
// calls (MediaNDJSON).
const (
	MediaJSON   = "application/json"
	MediaText   = "text/plain; charset=utf-8"
	MediaNDJSON = "application/x-ndjson"
)

// Millis converts a duration to float64 milliseconds, the unit of every *_ms column.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Schema returns the Parquet schema of a table's row type.
func Schema(table string) (*parquet.Schema, error) {
	t, err := RowType(table)
	if err != nil {
		return nil, err
	}
	return parquet.SchemaOf(reflect.New(t).Elem().Interface()), nil
}

// RowType returns the Go row type of a table.
func RowType(table string) (reflect.Type, error) {
	switch table {
	case TableSteps:
		return reflect.TypeFor[StepRow](), nil
	case TableEpisodes:
		return reflect.TypeFor[EpisodeRow](), nil
	case TableRewards:
		return reflect.TypeFor[RewardRow](), nil
	case TableBlobs:
		return reflect.TypeFor[BlobRow](), nil
	}
	return nil, fmt.Errorf("schemas: unknown table %q (known: %s)", table, strings.Join(Tables, ", "))
}

// Columns returns the column names of a table in schema order.
func Columns(table string) ([]string, error) {
	t, err := RowType(table)
	if err != nil {
		return nil, err
	}
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("parquet"), ",")
		out = append(out, name)
	}
	return out, nil
}
