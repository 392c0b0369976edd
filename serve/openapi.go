package serve

import (
	"net/http"
	"strconv"
	"strings"
)

// route is one route the server serves: the handler Handler registers and
// what GET /openapi.json says of it, from one table, so the document lists
// exactly the routes there are.
type route struct {
	method, path string
	handler      http.HandlerFunc
	tag, summary string
	description  string
	// request is the JSON body's schema (a $ref into components), or nil.
	request map[string]any
	// response is the 200 answer's schema; nil for /ws (a 101).
	response map[string]any
	// errors are the error statuses the route answers with HTTPError.
	errors []int
}

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

// routes is the server's route table.
func (s *Server) routes() []route {
	return []route{
		{method: "GET", path: "/ws", handler: s.handleWS, tag: "Environment Control", summary: "An OpenEnv session (WebSocket)",
			description: "One session per connection: reset, step, state and close messages (and forkline's branching extension), JSON text frames; see docs/serve.md."},
		{method: "POST", path: "/reset", handler: s.handleReset, tag: "Environment Control", summary: "Reset a fresh environment (stateless)",
			description: "Forks the chosen task's golden checkpoint, answers the first observation and destroys the fork. Keys other than the documented ones are accepted and ignored, as OpenEnv's ResetRequest (extra=allow).",
			request:     ref("ResetRequest"), response: ref("StepResult"), errors: []int{422, 500, 503}},
		{method: "POST", path: "/step", handler: s.handleStep, tag: "Environment Control", summary: "Run one action in a fresh environment (stateless)",
			description: "Runs the action in a fresh fork of the chosen task (a one-step episode, recorded), verifies a done action, and destroys the fork. Keys other than the documented ones are accepted and ignored, as OpenEnv's StepRequest (extra=allow); unknown keys inside the action are refused.",
			request:     ref("StepRequest"), response: ref("StepResult"), errors: []int{422, 500, 503}},
		{method: "GET", path: "/state", handler: s.handleState, tag: "State Management", summary: "The state of a fresh environment",
			description: "As OpenEnv's server builds an environment per request: no episode. A session's state is its state message.", response: ref("State")},
		{method: "GET", path: "/schema", handler: s.handleSchema, tag: "Schema", summary: "JSON Schemas of actions, observations and state",
			response: ref("SchemaResponse")},
		{method: "GET", path: "/metadata", handler: s.handleMetadata, tag: "Environment Info", summary: "OpenEnv's EnvironmentMetadata",
			response: ref("EnvironmentMetadata")},
		{method: "GET", path: "/health", handler: s.handleHealth, tag: "Health", summary: "healthy, or unhealthy (503) while the server drains",
			response: ref("HealthResponse"), errors: []int{503}},
		{method: "GET", path: "/tasks", handler: s.handleTasks, tag: "Environment Info", summary: "The tasks served, with their limits (forkline's)",
			response: map[string]any{"type": "array", "items": ref("TaskInfo")}},
		{method: "GET", path: "/extensions", handler: s.handleExtensions, tag: "Environment Info", summary: "The protocol extensions served, with their messages' schemas (forkline's)",
			response: map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "object"}}},
		{method: "POST", path: "/mcp", handler: s.handleMCP, tag: "MCP", summary: "MCP (JSON-RPC 2.0): the task's actions as tools, a tool call as a step",
			description: "initialize, ping, tools/list, tools/call, and OpenEnv's openenv/session/create and openenv/session/close. Stateless: no Mcp-Session-Id; a call without a session_id is a one-step episode in a fresh fork. A notification is answered 202 with no body.",
			request:     ref("JSONRPCRequest"), response: ref("JSONRPCResponse")},
		{method: "GET", path: "/openapi.json", handler: s.handleOpenAPI, tag: "Schema", summary: "This document",
			response: map[string]any{"type": "object"}},
	}
}

// OpenAPIVersion is the version of the HTTP API GET /openapi.json
// describes (its info.version): OpenEnv's, "1.0.0" as OpenEnv's
// create_fastapi_app states it, which its validator reads as the standard
// profile openenv-http/1.x. forkline's own version is info's
// x-forkline-version and /metadata's version.
const OpenAPIVersion = "1.0.0"

func (s *Server) handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	writeHTTP(w, http.StatusOK, s.openAPI())
}

// openAPI builds the OpenAPI 3.1 document of the routes: its component
// schemas Action, Observation and State are /schema's (the same functions
// build both), with their $defs lifted into the components and their
// references rewritten to point there.
func (s *Server) openAPI() map[string]any {
	components := map[string]any{}
	wire := wireSchemas()
	for name, sch := range map[string]map[string]any{"Action": wire.Action, "Observation": wire.Observation, "State": wire.State} {
		addComponent(components, name, sch)
	}
	for name, sch := range requestSchemas() {
		addComponent(components, name, sch)
	}
	components["StepResult"] = stepResultSchema(ref("Observation"))
	paths := map[string]any{}
	for _, rt := range s.routes() {
		op := map[string]any{"tags": []any{rt.tag}, "summary": rt.summary, "operationId": operationID(rt)}
		if rt.description != "" {
			op["description"] = rt.description
		}
		responses := map[string]any{}
		if rt.response != nil {
			responses["200"] = map[string]any{"description": "OK", "content": map[string]any{"application/json": map[string]any{"schema": rt.response}}}
		} else {
			responses["101"] = map[string]any{"description": "Switching Protocols: the WebSocket session"}
		}
		if rt.path == "/mcp" {
			responses["202"] = map[string]any{"description": "Accepted: a notification, no body"}
		}
		for _, code := range rt.errors {
			responses[strconv.Itoa(code)] = map[string]any{"description": http.StatusText(code),
				"content": map[string]any{"application/json": map[string]any{"schema": ref("HTTPError")}}}
		}
		op["responses"] = responses
		if rt.request != nil {
			op["requestBody"] = map[string]any{"required": rt.path != "/reset", "content": map[string]any{"application/json": map[string]any{"schema": rt.request}}}
		}
		item, _ := paths[rt.path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[rt.path] = item
		}
		item[strings.ToLower(rt.method)] = op
	}
	return map[string]any{
		"openapi":           "3.1.0",
		"jsonSchemaDialect": jsonSchemaDialect,
		"info": map[string]any{
			"title":              "forkline serve: OpenEnv environment HTTP API",
			"version":            OpenAPIVersion,
			"description":        "Every reset is a fork of the task's golden checkpoint; actions are forkline's canonical actions (GET /schema). Multi-step episodes: /ws, or MCP sessions at /mcp.",
			"x-forkline-version": s.cfg.ToolVersion,
		},
		"paths":      paths,
		"components": map[string]any{"schemas": components},
	}
}

func operationID(rt route) string {
	name := strings.NewReplacer("/", "_", ".", "_").Replace(strings.Trim(rt.path, "/"))
	return strings.ToLower(rt.method) + "_" + name
}

// addComponent puts schema under name, its $defs beside it (a component
// each) and every "#/$defs/X" reference in it rewritten to
// "#/components/schemas/X"; "$schema" goes (jsonSchemaDialect says it).
func addComponent(components map[string]any, name string, schema map[string]any) {
	sch := embedded(schema)
	if defs, ok := sch["$defs"].(map[string]any); ok {
		delete(sch, "$defs")
		for k, d := range defs {
			components[k] = rewriteRefs(d)
		}
	}
	components[name] = rewriteRefs(sch)
}

// embedded is a copy of a root schema to place inside another document:
// without its "$schema".
func embedded(schema map[string]any) map[string]any {
	out := make(map[string]any, len(schema))
	for k, v := range schema {
		if k != "$schema" {
			out[k] = v
		}
	}
	return out
}

func rewriteRefs(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(s, "#/$defs/") {
				out[k] = "#/components/schemas/" + strings.TrimPrefix(s, "#/$defs/")
				continue
			}
			out[k] = rewriteRefs(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = rewriteRefs(e)
		}
		return out
	}
	return v
}

// stepResultSchema is the schema of a StepResult (the answer of a reset
// and a step, and an MCP tool call's structuredContent) around an
// observation schema.
func stepResultSchema(observation map[string]any) map[string]any {
	return map[string]any{
		"title": "StepResult", "type": "object",
		"description": "OpenEnv's ResetResponse and StepResponse: {observation, reward, done}.",
		"properties": map[string]any{
			"observation": observation,
			"reward":      map[string]any{"type": []any{"number", "null"}, "description": "The verifier's reward once done (a float on the wire: 1.0, not 1); null before, and when the task has none or it gave no number."},
			"done":        boolean("Whether the episode has ended."),
		},
		"required": []any{"observation", "reward", "done"}, "additionalProperties": false,
	}
}

// resetKeySchemas are the keys of a reset (resetKeys), as a schema's
// properties.
func resetKeySchemas() map[string]any {
	return map[string]any{
		"seed":            map[string]any{"type": []any{"integer", "null"}, "minimum": 0, "description": "Picks the task when task_id does not: the tasks sorted by id, seed mod their number."},
		"episode_id":      map[string]any{"type": []any{"string", "null"}, "maxLength": maxEpisodeID, "description": "The episode's id, unique in the dataset; else a random one."},
		"task_id":         map[string]any{"type": []any{"string", "null"}, "description": "The task (GET /tasks); else by seed, else round-robin."},
		"from_checkpoint": map[string]any{"type": []any{"string", "null"}, "description": "Branching extension: the episode is a branch of this checkpoint's."},
	}
}

// requestSchemas are the schemas the routes' bodies and errors have,
// beside /schema's.
func requestSchemas() map[string]map[string]any {
	step := resetKeySchemas()
	delete(step, "from_checkpoint")
	step["action"] = ref("Action")
	step["timeout_s"] = map[string]any{"type": []any{"number", "null"}, "exclusiveMinimum": 0, "description": "Caps the action's time (never beyond the task's action_timeout)."}
	step["request_id"] = map[string]any{"type": []any{"string", "null"}, "description": "Names the one-step episode unless episode_id does."}
	codes := []any{codeInvalidJSON, codeUnknownType, codeValidation, codeExecution, codeCapacityReached, codeFactory, codeSession}
	id := map[string]any{"type": []any{"string", "integer"}}
	return map[string]map[string]any{
		"ResetRequest": {"title": "ResetRequest", "type": "object", "properties": resetKeySchemas(), "additionalProperties": true,
			"description": "OpenEnv's ResetRequest with forkline's task_id; other keys are accepted and ignored (logged once per session)."},
		"StepRequest": {"title": "StepRequest", "type": "object", "properties": step, "required": []any{"action"}, "additionalProperties": true,
			"description": "OpenEnv's StepRequest with a reset's keys, which pick the task; other keys are accepted and ignored (logged once per session)."},
		"HTTPError": {"title": "HTTPError", "type": "object", "required": []any{"detail", "code"}, "properties": map[string]any{
			"detail": str("What went wrong."), "code": map[string]any{"type": "string", "enum": codes},
			"active_sessions": map[string]any{"type": []any{"integer", "null"}}, "max_sessions": map[string]any{"type": []any{"integer", "null"}}}},
		"HealthResponse": {"title": "HealthResponse", "type": "object", "required": []any{"status"},
			"properties": map[string]any{"status": map[string]any{"type": "string", "enum": []any{"healthy", "unhealthy"}}}},
		"EnvironmentMetadata": {"title": "EnvironmentMetadata", "type": "object", "required": []any{"name", "description"}, "additionalProperties": false,
			"properties": map[string]any{"name": str("forkline"), "description": str("The tasks and how resets are made."),
				"readme_content": nullableString(), "version": nullableString(), "author": nullableString(), "documentation_url": nullableString()}},
		"SchemaResponse": {"title": "SchemaResponse", "type": "object", "required": []any{"action", "observation", "state"}, "additionalProperties": false,
			"properties": map[string]any{"action": map[string]any{"type": "object"}, "observation": map[string]any{"type": "object"}, "state": map[string]any{"type": "object"}}},
		"TaskInfo": {"title": "TaskInfo", "type": "object", "additionalProperties": false, "required": anySlice(taskInfoKeys), "properties": map[string]any{
			"id": str("The task's id."), "hash": str("Its spec hash."), "instruction": str("Its instruction."),
			"max_steps": integer("Steps an episode may take."), "action_timeout": str("A Go duration."), "episode_timeout": str("A Go duration."),
			"browser": boolean("A browser task."), "verifier": boolean("It has a verifier."),
		}},
		"JSONRPCRequest": {"title": "JSONRPCRequest", "type": "object", "required": []any{"jsonrpc", "method"}, "additionalProperties": false,
			"properties": map[string]any{"jsonrpc": map[string]any{"const": "2.0"}, "method": map[string]any{"type": "string", "enum": anySlice(mcpMethods)},
				"params": map[string]any{"type": "object"}, "id": id}},
		"JSONRPCResponse": {"title": "JSONRPCResponse", "type": "object", "required": []any{"jsonrpc", "id"}, "additionalProperties": false,
			"properties": map[string]any{"jsonrpc": map[string]any{"const": "2.0"}, "id": map[string]any{"type": []any{"string", "integer", "null"}},
				"result": map[string]any{}, "error": map[string]any{"type": "object", "required": []any{"code", "message"},
					"properties": map[string]any{"code": map[string]any{"type": "integer"}, "message": map[string]any{"type": "string"}, "data": map[string]any{}}}}},
	}
}

// taskInfoKeys are TaskInfo's JSON keys.
var taskInfoKeys = []string{"id", "hash", "instruction", "max_steps", "action_timeout", "episode_timeout", "browser", "verifier"}

func nullableString() map[string]any { return map[string]any{"type": []any{"string", "null"}} }

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
