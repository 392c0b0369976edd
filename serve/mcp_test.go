package serve_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/serve"
	"github.com/forkline/forkline/serve/openenvtest"
)

const fixSum = "../examples/tasks/fix-sum.yaml"

// rpc posts one JSON-RPC message (any JSON) to /mcp with headers, and
// returns the status, the response's headers and its body.
func rpc(t *testing.T, base string, body string, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/mcp", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream") // as MCP clients send it
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, raw
}

// rpcAnswer decodes a JSON-RPC answer.
func rpcAnswer(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
	require.Equal(t, "2.0", m["jsonrpc"], "%s", raw)
	return m
}

func rpcErrorCode(t *testing.T, m map[string]any) float64 {
	t.Helper()
	e, ok := m["error"].(map[string]any)
	require.True(t, ok, "want an error: %v", m)
	return e["code"].(float64)
}

// MCP's transport and lifecycle as /mcp answers them: OpenEnv's validator
// probe (POST {}), initialize without a transport session, notifications
// (202, no body), ping, and the errors MCP and JSON-RPC 2.0 define.
func TestMCPTransportAndLifecycle(t *testing.T) {
	ts := startServer(t, serve.Config{Tasks: fixSum, ToolVersion: "v-test"})

	// OpenEnv's validator posts {} and wants a JSON-RPC 2.0 object with 200
	// (cli/_validation.py, validate_running_environment); OpenEnv's server
	// answers it Invalid Request with a null id.
	status, _, raw := rpc(t, ts.base, `{}`)
	require.Equal(t, 200, status)
	m := rpcAnswer(t, raw)
	require.Equal(t, -32600.0, rpcErrorCode(t, m))
	require.Contains(t, m, "id")
	require.Nil(t, m["id"])

	status, hdr, raw := rpc(t, ts.base, `{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}`)
	require.Equal(t, 200, status)
	require.Empty(t, hdr.Get("Mcp-Session-Id"), "stateless: no transport session")
	require.Equal(t, "application/json", hdr.Get("Content-Type"))
	res := rpcAnswer(t, raw)["result"].(map[string]any)
	require.Equal(t, "2025-06-18", res["protocolVersion"], "a revision spoken here is the client's")
	require.Equal(t, map[string]any{"name": "forkline", "version": "v-test"}, res["serverInfo"])
	require.Contains(t, res["capabilities"], "tools")
	_, _, raw = rpc(t, ts.base, `{"jsonrpc": "2.0", "id": "a", "method": "initialize", "params": {"protocolVersion": "1999-01-01"}}`)
	m = rpcAnswer(t, raw)
	require.Equal(t, "a", m["id"])
	require.Equal(t, "2025-11-25", m["result"].(map[string]any)["protocolVersion"], "else the newest")

	status, _, raw = rpc(t, ts.base, `{"jsonrpc": "2.0", "method": "notifications/initialized"}`, "MCP-Protocol-Version", "2025-06-18")
	require.Equal(t, http.StatusAccepted, status)
	require.Empty(t, raw)
	_, _, raw = rpc(t, ts.base, `{"jsonrpc": "2.0", "id": 7, "method": "ping"}`)
	require.Equal(t, map[string]any{}, rpcAnswer(t, raw)["result"])

	for _, bad := range []struct {
		name, body string
		headers    []string
		status     int
		code       float64
		says       string
	}{
		{"not JSON", `{"jsonrpc": `, nil, 200, -32700, "Parse error"},
		{"batch", `[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]`, nil, 200, -32600, "batch"},
		{"extra key", `{"jsonrpc": "2.0", "id": 1, "method": "ping", "render": true}`, nil, 200, -32600, `"render"`},
		{"jsonrpc 1.0", `{"jsonrpc": "1.0", "id": 1, "method": "ping"}`, nil, 200, -32600, "2.0"},
		{"null id", `{"jsonrpc": "2.0", "id": null, "method": "ping"}`, nil, 200, -32600, "id"},
		{"params not an object", `{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}`, nil, 200, -32602, "object"},
		{"unknown method", `{"jsonrpc": "2.0", "id": 1, "method": "resources/list"}`, nil, 200, -32601, "tools/call"},
		{"a cursor", `{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": "x"}}`, nil, 200, -32602, "cursor"},
		{"unknown session", `{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"session_id": "mcp-nope"}}`, nil, 200, -32602, "mcp-nope"},
		{"foreign origin", `{"jsonrpc": "2.0", "id": 1, "method": "ping"}`, []string{"Origin", "http://evil.example"}, 403, -32600, "Origin"},
		{"unknown revision", `{"jsonrpc": "2.0", "id": 1, "method": "ping"}`, []string{"MCP-Protocol-Version", "2099-01-01"}, 400, -32600, "2099-01-01"},
	} {
		status, _, raw := rpc(t, ts.base, bad.body, bad.headers...)
		require.Equal(t, bad.status, status, bad.name)
		m := rpcAnswer(t, raw)
		require.Equal(t, bad.code, rpcErrorCode(t, m), bad.name)
		require.Contains(t, m["error"].(map[string]any)["message"], bad.says, bad.name)
	}
	status, _, _ = openenvtest.HTTPRaw("GET", ts.base+"/mcp", nil)
	require.Equal(t, http.StatusMethodNotAllowed, status, "no SSE stream to open")
}

// toolSchemas compiles each tool's inputSchema and outputSchema.
func toolSchemas(t *testing.T, tools []any) (names []string, in, out map[string]*jsonschema.Schema) {
	t.Helper()
	in, out = map[string]*jsonschema.Schema{}, map[string]*jsonschema.Schema{}
	c := jsonschema.NewCompiler()
	for _, tl := range tools {
		tm := tl.(map[string]any)
		name := tm["name"].(string)
		names = append(names, name)
		require.NotEmpty(t, tm["description"])
		for key, dst := range map[string]map[string]*jsonschema.Schema{"inputSchema": in, "outputSchema": out} {
			sch := tm[key].(map[string]any)
			require.Equal(t, "object", sch["type"], "MCP: a tool's %s is an object schema", key)
			url := "mem://" + name + "/" + key
			require.NoError(t, c.AddResource(url, jsonValue(t, sch)))
			s, err := c.Compile(url)
			require.NoError(t, err, "%s's %s", name, key)
			dst[name] = s
		}
	}
	return names, in, out
}

// A tool call without a session is a one-step episode in a fresh fork,
// as POST /step is: the task's actions are the tools, their input schemas
// refuse what the server refuses, and the answer is MCP's CallToolResult
// with the StepResult as structuredContent, which the output schema
// describes.
func TestMCPStatelessToolCalls(t *testing.T) {
	var logs logBuffer
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Out: out, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	_, _, raw := rpc(t, ts.base, `{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}`)
	names, in, outSchemas := toolSchemas(t, rpcAnswer(t, raw)["result"].(map[string]any)["tools"].([]any))
	require.Equal(t, []string{"done", "exec", "read_file", "write_file"}, names, "every served task's actions: shell tasks here")
	require.NoError(t, in["exec"].Validate(jsonValue(t, map[string]any{"cmd": "ls", "timeout_ms": 5000})))
	require.Error(t, in["exec"].Validate(jsonValue(t, map[string]any{})), "cmd is required")
	require.Error(t, in["exec"].Validate(jsonValue(t, map[string]any{"cmd": "ls", "shell": "bash"})), "no other argument")
	require.NoError(t, in["exec"].Validate(jsonValue(t, map[string]any{"cmd": "ls", "metadata": map[string]any{"response_ids": []int{1}}})),
		"metadata (the model turn) as an action takes it")

	call := func(params string) map[string]any {
		t.Helper()
		status, _, raw := rpc(t, ts.base, `{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": `+params+`}`)
		require.Equal(t, 200, status)
		return rpcAnswer(t, raw)
	}
	m := call(`{"name": "exec", "arguments": {"cmd": "sh sum.sh 3"}, "task_id": "fix-sum", "episode_id": "mcp-once", "render": true}`)
	res := m["result"].(map[string]any)
	require.Equal(t, false, res["isError"])
	require.NoError(t, outSchemas["exec"].Validate(jsonValue(t, res["structuredContent"])))
	sc := res["structuredContent"].(map[string]any)
	require.Equal(t, "3\n", sc["observation"].(map[string]any)["output"], "sum.sh is off by one: 1+2")
	require.Equal(t, false, sc["done"])
	content := res["content"].([]any)[0].(map[string]any)
	require.Equal(t, "text", content["type"])
	require.Equal(t, sc["observation"].(map[string]any)["text"], content["text"])
	require.Len(t, logs.lines("ignoring request keys", "/mcp tools/call", "keys=render"), 1)

	_, _, raw = rpc(t, ts.base, `{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "done", "task_id": "fix-sum", "episode_id": "mcp-done"}}`)
	require.Contains(t, string(raw), `"reward":0.0,`, "a float on the wire: %s", raw)

	m = call(`{"name": "exec", "arguments": {"cmd": "ls", "shell": "bash"}, "task_id": "fix-sum"}`)
	res = m["result"].(map[string]any)
	require.Equal(t, true, res["isError"], "a refused action is a tool error a model can read")
	require.Contains(t, res["content"].([]any)[0].(map[string]any)["text"], "shell")
	m = call(`{"name": "exec", "arguments": {"kind": "exec", "cmd": "ls"}, "task_id": "fix-sum"}`)
	require.Equal(t, true, m["result"].(map[string]any)["isError"])
	require.Equal(t, -32602.0, rpcErrorCode(t, call(`{"name": "click", "arguments": {"x": 1, "y": 2}, "task_id": "fix-sum"}`)), "not a tool of fix-sum")
	require.Equal(t, -32602.0, rpcErrorCode(t, call(`{"arguments": {}}`)), "no name")
	require.Equal(t, -32602.0, rpcErrorCode(t, call(`{"name": "exec", "arguments": {"cmd": "ls"}, "task_id": "nope"}`)))
	requireNoSandboxes(t, ts.work)

	ts.stop(t)
	exits, steps := recorded(t, out)
	require.Contains(t, exits["mcp-once"], "cancelled: one-shot MCP tools/call")
	require.Equal(t, 1, steps["mcp-once"])
	require.Contains(t, exits["mcp-done"], "done")
}

// OpenEnv's MCPToolClient in production mode (openenv.core.mcp_client)
// drives a whole episode over /mcp: openenv/session/create resets, list_tools
// lists the task's tools, call_tool steps, the done tool verifies, close
// ends the session; the episode is recorded as one over /ws would be.
func TestMCPSessionsAsOpenEnvsMCPToolClientDrivesThem(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: fixSum, Out: out, MaxSessions: 1})
	c := openenvtest.NewMCPClient(ts.base)
	tools, err := c.ListTools()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(c.SessionID, "mcp-"), c.SessionID)
	var names []string
	for _, tl := range tools {
		names = append(names, tl["name"].(string))
		require.NotNil(t, tl["input_schema"])
	}
	require.Equal(t, []string{"done", "exec", "read_file", "write_file"}, names)

	// -max-sessions 1: the session holds the slot.
	other := openenvtest.NewMCPClient(ts.base)
	_, err = other.EnsureSession()
	require.ErrorContains(t, err, "at capacity")
	answer, err := other.Request("openenv/session/create", nil)
	require.NoError(t, err)
	require.Equal(t, "CAPACITY_REACHED", answer["error"].(map[string]any)["data"].(map[string]any)["code"])

	got, err := c.CallTool("exec", map[string]any{"cmd": "sh sum.sh 3"})
	require.NoError(t, err)
	obs := got.(map[string]any)["structuredContent"].(map[string]any)["observation"].(map[string]any)
	require.Equal(t, "3\n", obs["output"])
	require.Equal(t, 1.0, obs["step"])
	_, err = c.CallTool("write_file", map[string]any{"path": "sum.sh",
		"content": "n=$1; i=1; total=0\nwhile [ \"$i\" -le \"$n\" ]; do total=$((total + i)); i=$((i + 1)); done\necho \"$total\"\n"})
	require.NoError(t, err)
	got, err = c.CallTool("exec", map[string]any{"cmd": "sh sum.sh 3"})
	require.NoError(t, err)
	require.Equal(t, "6\n", got.(map[string]any)["structuredContent"].(map[string]any)["observation"].(map[string]any)["output"], "the session's fork kept the write")
	_, err = c.CallTool("click", map[string]any{"x": 1, "y": 1})
	require.ErrorContains(t, err, "Unknown tool: click")

	status, raw, err := openenvtest.HTTPRaw("POST", c.URL, map[string]any{"jsonrpc": "2.0", "id": 9, "method": "tools/call",
		"params": map[string]any{"name": "done", "arguments": map[string]any{"answer": "fixed"}, "session_id": c.SessionID}})
	require.NoError(t, err)
	require.Equal(t, 200, status)
	require.Contains(t, string(raw), `"done":true`)
	require.Contains(t, string(raw), `"reward":1.0,`, "%s", raw)
	got, err = c.CallTool("exec", map[string]any{"cmd": "true"})
	require.NoError(t, err)
	require.Equal(t, true, got.(map[string]any)["isError"], "a step after the end is a tool error")
	answer, err = c.Request("tools/call", map[string]any{"name": "exec", "arguments": map[string]any{"cmd": "true"}, "session_id": c.SessionID, "task_id": "fix-sum"})
	require.NoError(t, err)
	require.Equal(t, -32602.0, rpcErrorCode(t, answer), "a session's task was chosen when it was created")

	id := c.SessionID
	require.NoError(t, c.Close())
	answer, err = c.Request("openenv/session/close", map[string]any{"session_id": id})
	require.NoError(t, err)
	require.Contains(t, answer["error"].(map[string]any)["message"], "Unknown session_id")
	_, err = other.EnsureSession()
	require.NoError(t, err, "the closed session gave its slot back")
	_, err = other.CallTool("exec", map[string]any{"cmd": "true"})
	require.NoError(t, err)
	requireEventuallySandboxes(t, ts.work, 1)

	sum := ts.stop(t) // the drain ends the open session
	require.Equal(t, 2, sum.Sessions)
	requireNoSandboxes(t, ts.work)
	exits, steps := recorded(t, out)
	require.Len(t, exits, 2)
	var done, stopped int
	for id, exit := range exits {
		switch {
		case strings.HasPrefix(exit, "done"):
			done++
			require.Equal(t, 4, steps[id])
		case strings.Contains(exit, "the server stopped"):
			stopped++
			require.Equal(t, 1, steps[id])
		}
	}
	require.Equal(t, 1, done, "%v", exits)
	require.Equal(t, 1, stopped, "%v", exits)
}

func requireEventuallySandboxes(t *testing.T, work string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return sandboxes(t, work) == n }, 30*time.Second, 10*time.Millisecond,
		"sandboxes: %d, want %d", sandboxes(t, work), n)
}

// An MCP session that sends nothing for -idle-timeout is reaped: its
// episode ends cancelled and its sandbox is destroyed, as a /ws session's.
func TestIdleMCPSessionIsReaped(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: writeTask(t, sleepTask), Out: out, IdleTimeout: 300 * time.Millisecond})
	c := openenvtest.NewMCPClient(ts.base)
	answer, err := c.Request("openenv/session/create", map[string]any{"episode_id": "mcp-idle"})
	require.NoError(t, err)
	result := answer["result"].(map[string]any)
	c.SessionID = result["session_id"].(string)
	require.Equal(t, "mcp-idle", result["reset"].(map[string]any)["observation"].(map[string]any)["episode_id"])
	_, err = c.CallTool("exec", map[string]any{"cmd": "true"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return sandboxes(t, ts.work) == 0 }, 30*time.Second, 20*time.Millisecond)
	_, err = c.CallTool("exec", map[string]any{"cmd": "true"})
	require.ErrorContains(t, err, "Unknown session_id")
	sum := ts.stop(t)
	require.Equal(t, 1, sum.Reaped)
	exits, _ := recorded(t, out)
	require.Contains(t, exits["mcp-idle"], "cancelled: idle for 300ms")
}

// tools/list says what exec does in the task listed: a task whose shell
// persists gets the persistent shell's description (the one a policy offers
// it), a fresh one, and every task at once when they differ, the fresh one.
func TestMCPToolsSayTheTasksShell(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.yaml"), []byte("id: keep\ninstruction: keep state\nshell: persistent\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fresh.yaml"), []byte("id: fresh\ninstruction: one shell per command\n"), 0o644))
	ts := startServer(t, serve.Config{Tasks: dir, Out: filepath.Join(t.TempDir(), "served")})
	execDesc := func(params string) string {
		t.Helper()
		_, _, raw := rpc(t, ts.base, `{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": `+params+`}`)
		for _, tl := range rpcAnswer(t, raw)["result"].(map[string]any)["tools"].([]any) {
			if m := tl.(map[string]any); m["name"] == "exec" {
				return m["description"].(string)
			}
		}
		t.Fatalf("no exec tool in %s", raw)
		return ""
	}
	persistent, err := aci.ToolsFor([]runtime.ActionKind{runtime.ActExec}, aci.ShellPersistent)
	require.NoError(t, err)
	fresh, err := aci.Tools([]runtime.ActionKind{runtime.ActExec})
	require.NoError(t, err)
	require.NotEqual(t, fresh[0].Function.Description, persistent[0].Function.Description)
	require.Equal(t, persistent[0].Function.Description, execDesc(`{"task_id": "keep"}`))
	require.Equal(t, fresh[0].Function.Description, execDesc(`{"task_id": "fresh"}`))
	require.Equal(t, fresh[0].Function.Description, execDesc(`{}`), "the tasks differ: exec does not promise a shell that persists")
}
