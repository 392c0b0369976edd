package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/forkline/forkline/aci"

	"github.com/forkline/forkline/runtime"
)

// POST /mcp speaks MCP (JSON-RPC 2.0) as OpenEnv's server does
// (openenv.core.env_server: http_server.py's mcp_handler and POST /mcp,
// mcp_types.py) and as MCP's Streamable HTTP transport has it:
//
//   - the task's actions are the tools (tools/list): each tool's name is an
//     action kind, its inputSchema the action's alternative in /schema's
//     action schema without "kind", its outputSchema the StepResult a step
//     answers; a tool call (tools/call) is a step;
//   - stateless, as MCP's current revision allows a server to be: no
//     Mcp-Session-Id is issued and every request stands alone. A tool call
//     without a session is a one-step episode in a fresh fork, as POST
//     /step is (OpenEnv's mcp_handler builds an environment for a call
//     without a session and closes it after);
//   - OpenEnv's session methods, which its MCPToolClient uses in production
//     mode: openenv/session/create starts an episode (a reset: a fork of
//     the task's golden) and answers its session_id; tools/call and
//     tools/list with that session_id step it and list its task's tools;
//     openenv/session/close ends it. These sessions are forkline serve's
//     sessions like /ws ones: they count against -max-sessions, are reaped
//     after -idle-timeout, end cancelled when closed before done, and are
//     recorded;
//   - initialize, ping and notifications as MCP's lifecycle has them.
//
// A malformed message is answered as OpenEnv answers it: HTTP 200 with a
// JSON-RPC error whose id is null (its validator posts {} and requires
// exactly that). Responses are JSON, never an SSE stream; GET and DELETE
// /mcp are 405 (no stream to open, no transport session to end).

// mcpVersions are the MCP revisions spoken, newest first.
var mcpVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

// JSON-RPC 2.0 error codes (OpenEnv's JsonRpcErrorCode).
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	rpcInternalError  = -32603
	rpcServerError    = -32000
)

// MCP and OpenEnv methods.
const (
	mcpInitialize    = "initialize"
	mcpPing          = "ping"
	mcpToolsList     = "tools/list"
	mcpToolsCall     = "tools/call"
	mcpSessionCreate = "openenv/session/create"
	mcpSessionClose  = "openenv/session/close"
)

var mcpMethods = []string{mcpInitialize, mcpSessionClose, mcpSessionCreate, mcpPing, mcpToolsCall, mcpToolsList}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return e.Message }

// rpcResponse is a JSON-RPC response: result or error, and the request's
// id (null when it could not be read).
type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

var null = json.RawMessage("null")

func rpcFail(code int, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// rpcErrorOf is err as a JSON-RPC error: bad parameters are invalid
// params; the rest are server errors. data carries OpenEnv's error code
// (and, at capacity, its counts).
func rpcErrorOf(err error) *rpcError {
	var re *rpcError
	if errors.As(err, &re) {
		return re
	}
	var ce *capacityError
	if errors.As(err, &ce) {
		return &rpcError{Code: rpcServerError, Message: ce.Error(),
			Data: map[string]any{"code": codeCapacityReached, "active_sessions": ce.active, "max_sessions": ce.max}}
	}
	we := wireErrorOf(err)
	code := rpcServerError
	if we.Code == codeValidation || we.Code == codeInvalidJSON {
		code = rpcInvalidParams
	}
	return &rpcError{Code: code, Message: we.Message, Data: map[string]any{"code": we.Code}}
}

func (s *Server) handleMCP(w http.ResponseWriter, r *http.Request) {
	// MCP's transport: a server validates Origin (no page of another site
	// drives a sandbox through a browser), and refuses a protocol version
	// it does not speak.
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			writeHTTP(w, http.StatusForbidden, rpcResponse{JSONRPC: "2.0", ID: null,
				Error: rpcFail(rpcInvalidRequest, "serve: /mcp: Origin %s is not this server's: cross-origin pages cannot drive sandboxes", o)})
			return
		}
	}
	if v := r.Header.Get("MCP-Protocol-Version"); v != "" && !slices.Contains(mcpVersions, v) {
		writeHTTP(w, http.StatusBadRequest, rpcResponse{JSONRPC: "2.0", ID: null,
			Error: rpcFail(rpcInvalidRequest, "serve: /mcp: MCP-Protocol-Version %s is not spoken here (spoken: %s)", v, strings.Join(mcpVersions, ", "))})
		return
	}
	data, release, err := s.readBody(w, r)
	if err != nil {
		writeHTTP(w, http.StatusOK, rpcResponse{JSONRPC: "2.0", ID: null, Error: rpcFail(rpcParseError, "%v", err)})
		return
	}
	defer release()
	req, notification, rerr := parseRPC(data)
	if rerr != nil {
		writeHTTP(w, http.StatusOK, rpcResponse{JSONRPC: "2.0", ID: null, Error: rerr})
		return
	}
	if notification {
		// A notification (notifications/initialized, .../cancelled) or a
		// response: nothing to answer (MCP: 202 Accepted, no body).
		w.WriteHeader(http.StatusAccepted)
		return
	}
	res := rpcResponse{JSONRPC: "2.0", ID: req.id}
	result, err := s.mcpDispatch(r.Context(), req)
	if err != nil {
		res.Error = rpcErrorOf(err)
	} else {
		res.Result = result
	}
	writeHTTP(w, http.StatusOK, res)
}

// rpcRequest is a JSON-RPC request as read.
type rpcRequest struct {
	method string
	params map[string]json.RawMessage
	id     json.RawMessage
}

// parseRPC reads one JSON-RPC message. notification is set for a message
// without an id (a notification, or a response to a request this server
// never sends). Like OpenEnv's JsonRpcRequest it takes no other keys than
// jsonrpc, method, params and id.
func parseRPC(data []byte) (req rpcRequest, notification bool, _ *rpcError) {
	trimmed := bytes.TrimSpace(data)
	if !json.Valid(trimmed) {
		return req, false, rpcFail(rpcParseError, "Parse error: the body is not JSON")
	}
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return req, false, rpcFail(rpcInvalidRequest, "Invalid Request: a JSON-RPC batch; MCP's revisions since 2025-06-18 send one message per request, and so does this server")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return req, false, rpcFail(rpcInvalidRequest, "Invalid Request: want a JSON-RPC 2.0 object: %v", err)
	}
	_, hasResult := fields["result"]
	_, hasError := fields["error"]
	if _, hasMethod := fields["method"]; !hasMethod && (hasResult || hasError) {
		return req, true, nil // a response: this server sends no requests, so nothing waits for it
	}
	var unknown []string
	for k := range fields {
		if !slices.Contains([]string{"id", "jsonrpc", "method", "params"}, k) {
			unknown = append(unknown, fmt.Sprintf("%q", k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return req, false, rpcFail(rpcInvalidRequest, "Invalid Request: unknown key %s (known: id, jsonrpc, method, params)", strings.Join(unknown, ", "))
	}
	var version string
	if err := json.Unmarshal(fields["jsonrpc"], &version); err != nil || version != "2.0" {
		return req, false, rpcFail(rpcInvalidRequest, `Invalid Request: "jsonrpc" must be "2.0"`)
	}
	if err := json.Unmarshal(fields["method"], &req.method); err != nil || req.method == "" {
		return req, false, rpcFail(rpcInvalidRequest, `Invalid Request: "method" must be a non-empty string`)
	}
	if p, ok := fields["params"]; ok && string(p) != "null" {
		if err := json.Unmarshal(p, &req.params); err != nil {
			return req, false, rpcFail(rpcInvalidParams, "Params must be an object")
		}
	}
	if req.params == nil {
		req.params = map[string]json.RawMessage{}
	}
	id, ok := fields["id"]
	if !ok {
		return req, true, nil
	}
	var v any
	json.Unmarshal(id, &v)
	switch v.(type) {
	case string, float64:
		req.id = id
	default:
		return req, false, rpcFail(rpcInvalidRequest, `Invalid Request: "id" must be a string or a number (MCP: never null)`)
	}
	return req, false, nil
}

func (s *Server) mcpDispatch(ctx context.Context, req rpcRequest) (any, error) {
	switch req.method {
	case mcpInitialize:
		return s.mcpInitialize(req.params), nil
	case mcpPing:
		return map[string]any{}, nil
	case mcpToolsList:
		return s.mcpToolsList(req.params)
	case mcpToolsCall:
		return s.mcpToolsCall(ctx, req.params)
	case mcpSessionCreate:
		return s.mcpSessionCreate(ctx, req.params)
	case mcpSessionClose:
		return s.mcpSessionClose(req.params)
	}
	return nil, rpcFail(rpcMethodNotFound, "Method not found: %s (this server answers %s)", req.method, strings.Join(mcpMethods, ", "))
}

// mcpInitialize answers MCP's initialize: the client's revision when it is
// spoken here, else the newest; the tools capability; no session.
func (s *Server) mcpInitialize(params map[string]json.RawMessage) map[string]any {
	version := mcpVersions[0]
	var asked string
	if json.Unmarshal(params["protocolVersion"], &asked) == nil && slices.Contains(mcpVersions, asked) {
		version = asked
	}
	return map[string]any{
		"protocolVersion": version,
		"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
		"serverInfo":      map[string]any{"name": "forkline", "version": s.cfg.ToolVersion},
		"instructions": "forkline serve: every tool is one of the task's actions and every tools/call is a step. " +
			"Without a session_id a call is a one-step episode in a fresh fork of a task (task_id, seed and episode_id pick it, as a reset does); " +
			"openenv/session/create starts an episode and answers its session_id, which tools/call and tools/list take, and openenv/session/close ends it. " +
			"The done tool runs the task's verifier: its result has done and the reward.",
	}
}

// param decodes params[key] into dst when present (null counts as
// absent); ok reports whether it was.
func param(params map[string]json.RawMessage, key string, dst any) (ok bool, err error) {
	raw, present := params[key]
	if !present || string(raw) == "null" {
		return false, nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return false, rpcFail(rpcInvalidParams, "Invalid params: %s: %v", key, err)
	}
	return true, nil
}

// mcpTools are the tools of kinds: each one's inputSchema is the action's
// alternative in /schema's action schema (the same function builds both)
// without "kind", which the tool's name is; its outputSchema is what a
// step answers. With persistent, exec's description is the one a policy
// offers for a task whose shell persists (aci.ToolsFor): a client told
// that its commands share a shell when they do not reads a lost cd as done.
// With forksMemory too (gvisor), it says the shell is setup's, going on in
// the fork (aci.ExecShell), as collect's policies are told.
func mcpTools(kinds []runtime.ActionKind, persistent, forksMemory bool) []any {
	action := actionSchema()
	defs := action["$defs"]
	out := make([]any, 0, len(kinds))
	for _, alt := range action["oneOf"].([]any) {
		a := alt.(map[string]any)
		if !slices.Contains(kinds, runtime.ActionKind(a["title"].(string))) {
			continue
		}
		props := map[string]any{}
		for k, v := range a["properties"].(map[string]any) {
			if k != "kind" {
				props[k] = v
			}
		}
		var required []any
		for _, k := range a["required"].([]any) {
			if k != "kind" {
				required = append(required, k)
			}
		}
		input := map[string]any{"type": "object", "properties": props, "additionalProperties": false, "$defs": defs}
		if len(required) > 0 {
			input["required"] = required
		}
		desc := a["description"]
		if persistent && a["title"] == string(runtime.ActExec) {
			if ts, err := aci.ToolsFor([]runtime.ActionKind{runtime.ActExec}, aci.ExecShell(aci.ShellPersistent, forksMemory)); err == nil {
				desc = ts[0].Function.Description
			}
		}
		out = append(out, map[string]any{"name": a["title"], "description": desc, "inputSchema": input,
			"outputSchema": stepResultSchema(embedded(observationSchema()))})
	}
	return out
}

// kindsOf are the tools a set of tasks offers: the union of their allowed
// actions, in runtime.ActionKinds order.
func kindsOf(ts ...*served) []runtime.ActionKind {
	var out []runtime.ActionKind
	for _, k := range runtime.ActionKinds() {
		for _, t := range ts {
			if slices.Contains(t.spec.AllowedActions(), k) {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

func (s *Server) allServed() []*served {
	out := make([]*served, 0, len(s.specs))
	for _, sp := range s.specs {
		out = append(out, s.tasks[sp.ID])
	}
	return out
}

// mcpToolsList lists the tools: a session's task's, a task's (task_id,
// forkline's), or every task's.
func (s *Server) mcpToolsList(params map[string]json.RawMessage) (any, error) {
	if c, ok := params["cursor"]; ok && string(c) != "null" {
		return nil, rpcFail(rpcInvalidParams, "Invalid params: cursor: this server lists every tool at once and issues no cursor")
	}
	ts := s.allServed()
	var sid, taskID string
	if _, err := param(params, "session_id", &sid); err != nil {
		return nil, err
	}
	if _, err := param(params, "task_id", &taskID); err != nil {
		return nil, err
	}
	switch {
	case sid != "":
		ms, err := s.lookupMCP(sid)
		if err != nil {
			return nil, err
		}
		ts = []*served{ms.task}
	case taskID != "":
		t, err := s.pickTask(resetRequest{TaskID: &taskID})
		if err != nil {
			return nil, err
		}
		ts = []*served{t}
	}
	// exec says the shell persists only when it does in every task listed.
	persistent := len(ts) > 0
	for _, t := range ts {
		persistent = persistent && t.spec.Shell == aci.ShellPersistent
	}
	return map[string]any{"tools": mcpTools(kindsOf(ts...), persistent, s.prov.Capabilities().ForksMemory)}, nil
}

// callKeys are the params of tools/call: MCP's name, arguments and _meta,
// OpenEnv's session_id, and, for a call without a session, the keys of a
// one-shot step that pick its task.
var callKeys = []string{"_meta", "arguments", "episode_id", "name", "seed", "session_id", "task_id", "timeout_s"}

// mcpToolsCall takes one action: in the session's episode, or as a
// one-step episode in a fresh fork. A refused action (unknown or bad
// arguments, a step after the end) is a tool error (isError), which a
// model can read and correct, as MCP reports tool errors.
func (s *Server) mcpToolsCall(ctx context.Context, params map[string]json.RawMessage) (any, error) {
	var name, sid string
	if ok, err := param(params, "name", &name); err != nil {
		return nil, err
	} else if !ok || name == "" {
		return nil, rpcFail(rpcInvalidParams, "Missing 'name' in params")
	}
	args := map[string]json.RawMessage{}
	if _, err := param(params, "arguments", &args); err != nil {
		return nil, err
	}
	if _, err := param(params, "session_id", &sid); err != nil {
		return nil, err
	}
	if _, ok := args["kind"]; ok {
		return toolError(refuse(codeValidation, "serve: tools/call %s: arguments take no \"kind\": the tool's name is the action kind", name)), nil
	}
	args["kind"], _ = json.Marshal(name)
	action, _ := json.Marshal(args)

	fields := cloneFields(params)
	if _, ok := fields["from_checkpoint"]; ok {
		return nil, rpcFail(rpcInvalidParams, "Invalid params: from_checkpoint: branching needs a /ws session")
	}
	ignored := dropUnknown(fields, callKeys)
	if sid != "" {
		ms, err := s.lookupMCP(sid)
		if err != nil {
			return nil, err
		}
		ms.ignored.note(s.cfg.Logger, "/mcp tools/call", ignored, "session_id", sid)
		for _, k := range []string{"task_id", "seed", "episode_id", "timeout_s"} {
			if _, ok := fields[k]; ok {
				return nil, rpcFail(rpcInvalidParams, "Invalid params: %s: a session's task and episode were chosen when it was created", k)
			}
		}
		return ms.call(ctx, name, action)
	}
	s.oneShotKeys.note(s.cfg.Logger, "/mcp tools/call", ignored)
	delete(fields, "name")
	delete(fields, "arguments")
	delete(fields, "session_id")
	delete(fields, "_meta")
	var req stepRequest
	if err := decodeFields(fields, &req); err != nil {
		return nil, rpcFail(rpcInvalidParams, "Invalid params: %v", err)
	}
	if req.TimeoutS != nil && !(*req.TimeoutS > 0) {
		return nil, rpcFail(rpcInvalidParams, "Invalid params: timeout_s %v: want a number > 0", *req.TimeoutS)
	}
	if err := checkReset(req.resetRequest); err != nil {
		return nil, err
	}
	t, err := s.pickTask(req.resetRequest)
	if err != nil {
		return nil, err
	}
	req.TaskID = &t.spec.ID
	if err := offered(t, name); err != nil {
		return nil, err
	}
	dec, err := parseAction(action)
	if err != nil {
		return toolError(err), nil
	}
	res, err := s.oneShot(ctx, "one-shot MCP tools/call", req, dec)
	if err != nil {
		return nil, err
	}
	return toolResult(res), nil
}

func cloneFields(m map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// offered refuses a tool t does not offer (MCP: an unknown tool is a
// protocol error, invalid params).
func offered(t *served, name string) error {
	kinds := t.spec.AllowedActions()
	if slices.Contains(kinds, runtime.ActionKind(name)) {
		return nil
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return rpcFail(rpcInvalidParams, "Unknown tool: %s (task %s offers %s)", name, t.spec.ID, strings.Join(names, ", "))
}

// toolResult is a step's answer as MCP's CallToolResult: the observation's
// text (what forkline's policies show a model) and the screenshot as
// content; the whole StepResult (observation, reward, done) as
// structuredContent, which the tools' outputSchema describes.
func toolResult(res StepResult) map[string]any {
	content := []any{map[string]any{"type": "text", "text": res.Observation.Text}}
	if sc := res.Observation.Screenshot; sc != nil {
		content = append(content, map[string]any{"type": "image", "data": sc.PNGBase64, "mimeType": "image/png"})
	}
	return map[string]any{"content": content, "structuredContent": res, "isError": false}
}

// toolError is a refused action as a tool error, with OpenEnv's code.
func toolError(err error) map[string]any {
	we := wireErrorOf(err)
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": we.Message + " (" + we.Code + ")"}}, "isError": true}
}

// mcpSession is a session opened with openenv/session/create: one
// episode, stepped by tools/call with its id. Its calls run one at a time,
// in order.
type mcpSession struct {
	id   string
	srv  *Server
	task *served

	mu       sync.Mutex // held through a call, and by close
	live     *liveEpisode
	closed   bool
	lastUsed time.Time
	idle     *time.Timer // nil without an idle timeout
	ignored  keyLog
}

// mcpSessionCreate opens a session: a reset with params' keys (task_id,
// seed, episode_id, from_checkpoint), answered with its session_id and
// the reset's answer.
func (s *Server) mcpSessionCreate(ctx context.Context, params map[string]json.RawMessage) (any, error) {
	fields := cloneFields(params)
	delete(fields, "_meta")
	raw, _ := json.Marshal(fields)
	req, ignored, err := parseReset(raw)
	if err != nil {
		return nil, err
	}
	if err := s.takeSlot(); err != nil {
		return nil, err
	}
	// The session's episode outlives the request that opens it: its steps
	// arrive in later requests, so it is not ended when this one is (as a
	// WebSocket session's ends with its connection). It ends when the
	// session is closed, reaped idle, or the server stops. A client gone
	// while the session is made leaves it to the idle reaper.
	l, res, err := s.begin(context.WithoutCancel(ctx), req, func() {})
	if err != nil {
		s.releaseSlot()
		return nil, err
	}
	ms := &mcpSession{id: "mcp-" + randomID(), srv: s, task: l.t, live: l, lastUsed: time.Now()}
	ms.ignored.note(s.cfg.Logger, "/mcp openenv/session/create", ignored, "session_id", ms.id)
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		if l.final == nil {
			s.finish(l, runtime.ExitCancelled, "the server stopped")
		}
		s.releaseSlot()
		return nil, errStopping
	}
	if s.mcpSessions == nil {
		s.mcpSessions = map[string]*mcpSession{}
	}
	s.mcpSessions[ms.id] = ms
	s.mu.Unlock()
	s.stats.sessionOpened()
	if d := s.cfg.IdleTimeout; d > 0 {
		ms.mu.Lock()
		ms.idle = time.AfterFunc(d, ms.reap)
		ms.mu.Unlock()
	}
	return map[string]any{"session_id": ms.id, "reset": res}, nil
}

func (s *Server) lookupMCP(id string) (*mcpSession, error) {
	s.mu.Lock()
	ms := s.mcpSessions[id]
	s.mu.Unlock()
	if ms == nil {
		return nil, rpcFail(rpcInvalidParams, "Unknown session_id: %s (closed, reaped idle, or never opened: openenv/session/create opens one)", id)
	}
	return ms, nil
}

// call steps the session's episode with action (a tool call).
func (ms *mcpSession) call(ctx context.Context, name string, action []byte) (any, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.closed {
		return nil, rpcFail(rpcInvalidParams, "Unknown session_id: %s (it was closed)", ms.id)
	}
	ms.lastUsed = time.Now()
	defer func() { ms.lastUsed = time.Now() }()
	if err := offered(ms.task, name); err != nil {
		return nil, err
	}
	l := ms.live
	if l.final != nil {
		return toolError(refuse(codeExecution, "serve: tools/call: episode %s has ended (%s); open another session for another episode", l.ep.Row.EpisodeID, l.ep.Row.ExitReason)), nil
	}
	dec, err := parseAction(action)
	if err != nil {
		return toolError(err), nil
	}
	res, err := ms.srv.step(ctx, l, dec)
	if err != nil {
		return nil, err
	}
	return toolResult(res), nil
}

// mcpSessionClose ends a session (OpenEnv's openenv/session/close).
func (s *Server) mcpSessionClose(params map[string]json.RawMessage) (any, error) {
	var sid string
	if ok, err := param(params, "session_id", &sid); err != nil {
		return nil, err
	} else if !ok || sid == "" {
		return nil, rpcFail(rpcInvalidParams, "Invalid params - 'session_id' is required")
	}
	ms, err := s.lookupMCP(sid)
	if err != nil {
		return nil, err
	}
	ms.mu.Lock()
	closed := ms.closeLocked("the client closed the session (openenv/session/close)")
	ms.mu.Unlock()
	if !closed {
		return nil, rpcFail(rpcInvalidParams, "Unknown session_id: %s (it was closed)", sid)
	}
	return map[string]any{"session_id": sid, "closed": true}, nil
}

// closeLocked ends the session's episode (cancelled with why, when it is
// still running), forgets the session and frees its slot; false when it
// was closed already. ms.mu is held.
func (ms *mcpSession) closeLocked(why string) bool {
	if ms.closed {
		return false
	}
	ms.closed = true
	if ms.idle != nil {
		ms.idle.Stop()
	}
	if ms.live.final == nil {
		ms.srv.finish(ms.live, runtime.ExitCancelled, why)
	}
	ms.srv.mu.Lock()
	delete(ms.srv.mcpSessions, ms.id)
	ms.srv.mu.Unlock()
	ms.srv.releaseSlot()
	return true
}

// reap closes the session when it has been idle for -idle-timeout (a call
// in progress is not idleness: it holds mu, and counts as a use when it
// ends), else waits again for the rest.
func (ms *mcpSession) reap() {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	d := ms.srv.cfg.IdleTimeout
	if left := d - time.Since(ms.lastUsed); left > 0 {
		ms.idle.Reset(left)
		return
	}
	if ms.closeLocked(fmt.Sprintf("idle for %s: the session was reaped (the server's idle timeout)", d)) {
		ms.srv.stats.reaped()
	}
}

// closeMCPSessions ends the MCP sessions (the drain): with wait, every
// one, once its call in flight is answered; without, those between calls.
func (s *Server) closeMCPSessions(why string, wait bool) {
	s.mu.Lock()
	open := make([]*mcpSession, 0, len(s.mcpSessions))
	for _, ms := range s.mcpSessions {
		open = append(open, ms)
	}
	s.mu.Unlock()
	for _, ms := range open {
		if wait {
			ms.mu.Lock()
		} else if !ms.mu.TryLock() {
			continue
		}
		ms.closeLocked(why)
		ms.mu.Unlock()
	}
}
