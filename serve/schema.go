package serve

import (
	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/runtime"
)

// jsonSchemaDialect is the JSON Schema version of /schema's schemas (the one
// Pydantic's model_json_schema writes for OpenEnv servers).
const jsonSchemaDialect = "https://json-schema.org/draft/2020-12/schema"

// Schemas is the /schema answer: OpenEnv's SchemaResponse. It holds these
// three keys only, as OpenEnv's models take no others; the branching
// extension's fields are in the observation and state schemas, and its
// messages' schemas are at /extensions.
type Schemas struct {
	Action      map[string]any `json:"action"`
	Observation map[string]any `json:"observation"`
	State       map[string]any `json:"state"`
}

// BranchingExtension names the branching extension in /metadata, /schema
// and /extensions.
const BranchingExtension = "forkline.branching/v1"

// extensionNote is the $comment of the observation and state schemas: where
// the extension's fields come from.
const extensionNote = BranchingExtension + ": parent_episode_id, branch_index, group_id (observation) and checkpoints (state) come with forkline's branching extension; its messages' schemas are at GET /extensions."

// wireSchemas builds the three schemas. The action schema is the canonical
// actions as aci offers them to models — one alternative per kind, its
// properties exactly the tool's parameters, plus "kind" and OpenEnv's
// "metadata" — so a trainer that offers a model the same tools sends what
// the model called.
func wireSchemas() Schemas {
	return Schemas{Action: actionSchema(), Observation: observationSchema(), State: stateSchema()}
}

// branchingSchemas are the branching extension's /ws messages: what a
// client sends, and what it is answered.
func branchingSchemas() map[string]any {
	id := str("A checkpoint id, as a checkpoint message answered it.")
	msg := func(typ, desc string, data map[string]any) map[string]any {
		props := map[string]any{"type": map[string]any{"const": typ}}
		required := []any{"type"}
		if data != nil {
			props["data"] = data
			required = append(required, "data")
		}
		return map[string]any{"$schema": jsonSchemaDialect, "title": typ, "description": desc, "type": "object",
			"properties": props, "required": required, "additionalProperties": false}
	}
	object := func(props map[string]any, required ...any) map[string]any {
		return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
	}
	return map[string]any{
		"description": "Branching over the wire: checkpoint a session's episode after a step, and reset other sessions (or this one) from the checkpoint, each a fork of it continuing the episode's history, recorded with its lineage. The checkpointed episode goes on. Error codes beside OpenEnv's: CHECKPOINT_NOT_FOUND, CHECKPOINT_LIMIT.",
		"client": map[string]any{
			"checkpoint": msg(msgCheckpoint, "Checkpoint the session's running episode after its last step.", nil),
			"release":    msg(msgRelease, "Release a checkpoint this session made; branches running from it go on.", object(map[string]any{"checkpoint_id": id}, "checkpoint_id")),
			"reset": msg(msgReset, "A reset whose episode is a branch of the checkpoint's: from_checkpoint names it (and so the task); episode_id is optional.",
				object(map[string]any{"from_checkpoint": id, "episode_id": str("The branch's id; by default derived from the parent's id, the step and the branch index, as collect derives it.")}, "from_checkpoint")),
		},
		"server": map[string]any{
			"checkpoint": msg(msgCheckpoint, "The checkpoint made (or the one made at this step already).", object(map[string]any{
				"checkpoint_id": id, "episode_id": str("The episode checkpointed: the branches' parent_episode_id."),
				"task_id": str("Its task."), "step": integer("The steps the checkpoint holds: the branches' branch_step."),
			}, "checkpoint_id", "episode_id", "task_id", "step")),
			"released": msg(msgReleased, "The checkpoint was released.", object(map[string]any{"checkpoint_id": id}, "checkpoint_id")),
		},
	}
}

func actionSchema() map[string]any {
	var alternatives []any
	for _, k := range runtime.ActionKinds() {
		fn := aci.ToolSchema(k)["function"].(map[string]any)
		params := fn["parameters"].(map[string]any)
		props := params["properties"].(map[string]any)
		props["kind"] = map[string]any{"const": string(k)}
		props["metadata"] = map[string]any{"$ref": "#/$defs/ActionMetadata"}
		required := append([]any{"kind"}, params["required"].([]any)...)
		alternatives = append(alternatives, map[string]any{
			"title": string(k), "description": fn["description"], "type": "object",
			"properties": props, "required": required, "additionalProperties": false,
		})
	}
	ids := map[string]any{"type": "array", "items": map[string]any{"type": "integer", "minimum": 0, "maximum": 2147483647}}
	return map[string]any{
		"$schema":     jsonSchemaDialect,
		"title":       "Action",
		"description": "One canonical forkline action: {\"kind\": KIND, ...its fields}; metadata may carry the model turn that chose it.",
		"oneOf":       alternatives,
		"$defs": map[string]any{
			"ActionMetadata": map[string]any{
				"type":        "object",
				"description": "The model turn that chose the action, kept in the dataset's token record: the inference server's own token ids, never a retokenization.",
				"properties": map[string]any{
					"model":             map[string]any{"type": "string"},
					"text":              map[string]any{"type": "string", "description": "The assistant text as generated."},
					"reasoning":         map[string]any{"type": "string"},
					"tool_call_id":      map[string]any{"type": "string"},
					"finish_reason":     map[string]any{"type": "string"},
					"prompt_ids":        withDescription(ids, "The prompt's token ids as the server tokenized it."),
					"response_ids":      withDescription(ids, "The token ids the model generated this turn."),
					"logprobs":          map[string]any{"type": "array", "items": map[string]any{"type": "number", "maximum": 0}, "description": "One per response id."},
					"prompt_tokens":     map[string]any{"type": "integer", "minimum": 0},
					"completion_tokens": map[string]any{"type": "integer", "minimum": 0},
				},
				"additionalProperties": false,
			},
		},
	}
}

func withDescription(s map[string]any, d string) map[string]any {
	out := map[string]any{"description": d}
	for k, v := range s {
		out[k] = v
	}
	return out
}

func str(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
func integer(desc string) map[string]any {
	return map[string]any{"type": "integer", "description": desc}
}
func boolean(desc string) map[string]any {
	return map[string]any{"type": "boolean", "description": desc}
}

// observationSchema is OpenEnv's Observation (done, reward, metadata) with
// forkline's fields. On the wire done and reward sit beside the
// observation, and metadata is never sent, as OpenEnv serializes it.
func observationSchema() map[string]any {
	return map[string]any{
		"$schema":  jsonSchemaDialect,
		"title":    "Observation",
		"$comment": extensionNote,
		"type":     "object",
		"properties": map[string]any{
			"done":         boolean("Whether the episode has ended."),
			"reward":       map[string]any{"type": []any{"number", "null"}, "description": "The verifier's reward once done; null before, and when the task has no verifier or it produced no number."},
			"metadata":     map[string]any{"type": "object"},
			"episode_id":   str("The episode's id: the one the reset named, or one the server made."),
			"task_id":      str("The task the episode runs."),
			"step":         integer("Steps taken so far: 0 after the reset."),
			"instruction":  str("The task's instruction (at reset)."),
			"text":         str("What forkline's policies show a model: the instruction at reset, then the step's result as text."),
			"output":       str("The action's output (stdout and stderr interleaved, or the file read), as valid UTF-8."),
			"output_bytes": integer("Size of the full output before any cap."),
			"truncated":    boolean("The output was capped; head and tail are kept around a marker."),
			"exit_code":    integer("The command's exit status; -1 when killed or not a command."),
			"error":        boolean("The action failed: non-zero exit, timeout, refused path, missing file."),
			"error_kind":   map[string]any{"type": "string", "enum": []any{"", "exit_status", "timeout", "path_refused", "not_found", "unsupported", "action_failed", "interrupted"}},
			"timed_out":    boolean("The per-action timeout fired and the process tree was killed."),
			"screenshot": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"png_base64": str("The PNG, base64."),
					"width":      integer("Pixels; click coordinates use the same space."),
					"height":     integer("Pixels."),
				},
				"required":             []any{"png_base64", "width", "height"},
				"additionalProperties": false,
			},
			"a11y_tree":         str("The browser's accessibility tree, compact JSON."),
			"action_taken":      boolean("False when the step came after the episode had ended: the reply only says how it ended."),
			"exit_reason":       map[string]any{"type": "string", "enum": exitReasons()},
			"detail":            str("What ended the episode, when something did."),
			"answer":            str("The done action's answer."),
			"reward_detail":     str("The verifier's output tail, or why it gave no reward."),
			"parent_episode_id": str("On a branch's reset (from_checkpoint): the episode it continues."),
			"branch_index":      integer("On a branch's reset: its index among the branches of its parent at this step."),
			"group_id":          str("On a branch's reset: the group its siblings share (the dataset's group_id)."),
		},
		"required":             []any{"episode_id", "task_id", "step", "text", "output", "output_bytes", "truncated", "exit_code", "error", "error_kind", "timed_out"},
		"additionalProperties": false,
	}
}

func exitReasons() []any {
	var out []any
	for _, r := range runtime.ExitReasons() {
		out = append(out, string(r))
	}
	return out
}

// stateSchema is OpenEnv's State with forkline's fields.
func stateSchema() map[string]any {
	return map[string]any{
		"$schema":  jsonSchemaDialect,
		"title":    "State",
		"$comment": extensionNote,
		"type":     "object",
		"properties": map[string]any{
			"episode_id":  map[string]any{"type": []any{"string", "null"}, "description": "The current episode; null before the first reset."},
			"step_count":  map[string]any{"type": "integer", "minimum": 0, "description": "Steps taken in the current episode."},
			"task_id":     str("The task the episode runs."),
			"done":        boolean("Whether the episode has ended."),
			"exit_reason": map[string]any{"type": "string", "enum": exitReasons()},
			"reward":      map[string]any{"type": []any{"number", "null"}},
			"checkpoints": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": "The checkpoints the session holds (branching extension)."},
		},
		"required":             []any{"episode_id", "step_count", "done"},
		"additionalProperties": false,
	}
}
