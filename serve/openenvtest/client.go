// Package openenvtest is an OpenEnv client written from OpenEnv's wire
// protocol as its code has it (openenv.core.env_client.EnvClient and
// GenericEnvClient, env_server/types.py and http_server.py), not from
// forkline's server, for the tests and benchmarks that drive forkline
// serve: it speaks to ws://HOST/ws with another WebSocket implementation
// than the server's (gorilla's) and reads every answer as untyped JSON.
// It knows nothing of package serve.
package openenvtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// Client is one session, as EnvClient is:
//
//	reset(**kwargs) → send {"type": "reset", "data": kwargs}
//	step(action)    → send {"type": "step", "data": action}
//	state()         → send {"type": "state"}
//	disconnect()    → send {"type": "close"}, then close the socket
//
// An answer of type "error" is the client's RuntimeError, carrying
// data.message and data.code; any other answer's data is parsed as
// StepResult(observation=data["observation"], reward=data.get("reward"),
// done=data.get("done", False)).
type Client struct {
	conn    *websocket.Conn
	timeout time.Duration // EnvClient's message_timeout_s
	last    []byte        // the last answer's bytes
}

// LastRaw is the last answer as it came over the wire.
func (c *Client) LastRaw() []byte { return c.last }

// StepResult is OpenEnv's StepResult.
type StepResult struct {
	Observation map[string]any
	Reward      *float64
	Done        bool
}

// ServerError is what EnvClient raises for an error answer.
type ServerError struct {
	Message string
	Code    string
	Data    map[string]any
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("openenvtest: server error: %s (code: %s)", e.Message, e.Code)
}

// Dial converts base (http://...) to ws://.../ws as EnvClient does.
func Dial(base string) (*Client, error) {
	url := "ws" + strings.TrimPrefix(base, "http") + "/ws"
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	conn, _, err := d.Dial(url, nil)
	if err != nil {
		return nil, fmt.Errorf("openenvtest: failed to connect to %s: %w", url, err)
	}
	return &Client{conn: conn, timeout: 60 * time.Second}, nil
}

func (c *Client) SendAndReceive(msg map[string]any) (map[string]any, error) {
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	return c.SendRaw(b)
}

// SendRaw sends bytes as they are (to test what a broken client sends).
func (c *Client) SendRaw(b []byte) (map[string]any, error) {
	if err := c.conn.WriteMessage(websocket.TextMessage, b); err != nil {
		return nil, err
	}
	return c.Receive()
}

func (c *Client) Receive() (map[string]any, error) {
	c.conn.SetReadDeadline(time.Now().Add(c.timeout))
	_, raw, err := c.conn.ReadMessage()
	if err != nil {
		return nil, err
	}
	c.last = raw
	var resp map[string]any
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, fmt.Errorf("openenvtest: answer is not JSON: %w: %s", err, raw)
	}
	if resp["type"] == "error" {
		data, _ := resp["data"].(map[string]any)
		msg, _ := data["message"].(string)
		code, _ := data["code"].(string)
		return resp, &ServerError{Message: msg, Code: code, Data: data}
	}
	return resp, nil
}

func parseResult(resp map[string]any) StepResult {
	data, _ := resp["data"].(map[string]any)
	r := StepResult{}
	r.Observation, _ = data["observation"].(map[string]any)
	if v, ok := data["reward"].(float64); ok {
		r.Reward = &v
	}
	r.Done, _ = data["done"].(bool)
	return r
}

func (c *Client) Reset(kwargs map[string]any) (StepResult, error) {
	if kwargs == nil {
		kwargs = map[string]any{}
	}
	resp, err := c.SendAndReceive(map[string]any{"type": "reset", "data": kwargs})
	if err != nil {
		return StepResult{}, err
	}
	if resp["type"] != "observation" {
		return StepResult{}, fmt.Errorf("openenvtest: reset answered %v", resp["type"])
	}
	return parseResult(resp), nil
}

func (c *Client) Step(action map[string]any) (StepResult, error) {
	resp, err := c.SendAndReceive(map[string]any{"type": "step", "data": action})
	if err != nil {
		return StepResult{}, err
	}
	if resp["type"] != "observation" {
		return StepResult{}, fmt.Errorf("openenvtest: step answered %v", resp["type"])
	}
	return parseResult(resp), nil
}

func (c *Client) State() (map[string]any, error) {
	resp, err := c.SendAndReceive(map[string]any{"type": "state"})
	if err != nil {
		return nil, err
	}
	if resp["type"] != "state" {
		return nil, fmt.Errorf("openenvtest: state answered %v", resp["type"])
	}
	data, _ := resp["data"].(map[string]any)
	return data, nil
}

// Disconnect is EnvClient.disconnect: a close message, then the socket's
// close handshake.
func (c *Client) Disconnect() {
	b, _ := json.Marshal(map[string]any{"type": "close"})
	c.conn.WriteMessage(websocket.TextMessage, b)
	c.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.conn.Close()
}

// Drop closes the TCP connection with no close message or frame: a
// trainer process that died (the kernel sends FIN).
func (c *Client) Drop() { c.conn.UnderlyingConn().Close() }

// DropReset closes the TCP connection with a reset (RST: SO_LINGER 0), as
// a host that lost the process's socket state does.
func (c *Client) DropReset() {
	if tc, ok := c.conn.UnderlyingConn().(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.conn.UnderlyingConn().Close()
}

// Send sends a message without waiting for its answer (a step whose
// client goes away while it runs).
func (c *Client) Send(msg map[string]any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return c.conn.WriteMessage(websocket.TextMessage, b)
}

// SendBytes sends b as one text message without waiting for its answer
// (Receive reads it): many sessions can send one prepared payload.
func (c *Client) SendBytes(b []byte) error { return c.conn.WriteMessage(websocket.TextMessage, b) }

// Raw is the underlying connection, for tests that write bytes a
// WebSocket library would not (a frame that stops half-way).
func (c *Client) Raw() net.Conn { return c.conn.UnderlyingConn() }

// WaitClosed reads until the server closes the connection and returns the
// close frame's code and text (-1 when the connection ended without one).
func (c *Client) WaitClosed(within time.Duration) (int, string, error) {
	c.conn.SetReadDeadline(time.Now().Add(within))
	for {
		_, _, err := c.conn.ReadMessage()
		if err == nil {
			continue
		}
		if ce, ok := err.(*websocket.CloseError); ok {
			return ce.Code, ce.Text, nil
		}
		if strings.Contains(err.Error(), "timeout") {
			return 0, "", err
		}
		return -1, "", nil
	}
}

// HTTPJSON is a one-shot HTTP call: method, path, body (nil for none);
// the status and the decoded answer.
func HTTPJSON(method, url string, body any) (int, map[string]any, error) {
	status, raw, err := HTTPRaw(method, url, body)
	if err != nil {
		return 0, nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return status, nil, fmt.Errorf("openenvtest: answer is not a JSON object: %w: %s", err, raw)
	}
	return status, out, nil
}

// HTTPRaw is a one-shot HTTP call that returns the answer's bytes as they
// came: method, url, body (nil for none).
func HTTPRaw(method, url string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// MCPClient speaks to /mcp as OpenEnv's MCPToolClient does in production
// mode (openenv.core.mcp_client, use_production_mode=True):
// _production_mcp_request POSTs {"jsonrpc": "2.0", "method", "params":
// params or {}, "id": a counter from 1} to BASE/mcp and reads the JSON
// answer (raise_for_status first); _ensure_production_session sends
// openenv/session/create once and keeps result.session_id; list_tools
// sends tools/list with {"session_id"}; call_tool sends tools/call with
// {"name", "arguments", "session_id"} and returns result["data"] when the
// result has it, else the result; close sends openenv/session/close.
type MCPClient struct {
	URL       string // BASE/mcp
	SessionID string
	id        int
}

// NewMCPClient is MCPToolClient(base_url=base) with production mode on.
func NewMCPClient(base string) *MCPClient {
	return &MCPClient{URL: strings.TrimRight(base, "/") + "/mcp"}
}

// Request is _production_mcp_request: the whole JSON-RPC answer.
func (m *MCPClient) Request(method string, params map[string]any) (map[string]any, error) {
	if params == nil {
		params = map[string]any{}
	}
	m.id++
	status, raw, err := HTTPRaw("POST", m.URL, map[string]any{"jsonrpc": "2.0", "method": method, "params": params, "id": m.id})
	if err != nil {
		return nil, err
	}
	if status >= 400 {
		return nil, fmt.Errorf("openenvtest: POST %s: HTTP %d: %s", m.URL, status, raw)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("openenvtest: /mcp answer is not a JSON object: %w: %s", err, raw)
	}
	return out, nil
}

// rpcFailure is an answer's "error" as MCPToolClient raises it.
func rpcFailure(what string, answer map[string]any) error {
	e, ok := answer["error"].(map[string]any)
	if !ok {
		return nil
	}
	msg, _ := e["message"].(string)
	if msg == "" {
		msg = "unknown error"
	}
	return fmt.Errorf("%s failed: %s", what, msg)
}

// EnsureSession is _ensure_production_session.
func (m *MCPClient) EnsureSession() (string, error) {
	if m.SessionID != "" {
		return m.SessionID, nil
	}
	data, err := m.Request("openenv/session/create", nil)
	if err != nil {
		return "", err
	}
	if err := rpcFailure("openenvtest: creating the MCP session", data); err != nil {
		return "", err
	}
	result, _ := data["result"].(map[string]any)
	id, _ := result["session_id"].(string)
	if id == "" {
		return "", fmt.Errorf("openenvtest: failed to create MCP session: missing session_id")
	}
	m.SessionID = id
	return id, nil
}

// ListTools is list_tools: each tool's name, description and
// input_schema (read from "input_schema", else "inputSchema").
func (m *MCPClient) ListTools() ([]map[string]any, error) {
	sid, err := m.EnsureSession()
	if err != nil {
		return nil, err
	}
	data, err := m.Request("tools/list", map[string]any{"session_id": sid})
	if err != nil {
		return nil, err
	}
	if err := rpcFailure("list_tools", data); err != nil {
		return nil, err
	}
	result, _ := data["result"].(map[string]any)
	list, _ := result["tools"].([]any)
	var out []map[string]any
	for _, t := range list {
		tm, _ := t.(map[string]any)
		schema := tm["input_schema"]
		if schema == nil {
			schema = tm["inputSchema"]
		}
		out = append(out, map[string]any{"name": tm["name"], "description": tm["description"], "input_schema": schema})
	}
	return out, nil
}

// CallTool is call_tool(name, **kwargs).
func (m *MCPClient) CallTool(name string, kwargs map[string]any) (any, error) {
	sid, err := m.EnsureSession()
	if err != nil {
		return nil, err
	}
	if kwargs == nil {
		kwargs = map[string]any{}
	}
	data, err := m.Request("tools/call", map[string]any{"name": name, "arguments": kwargs, "session_id": sid})
	if err != nil {
		return nil, err
	}
	if err := rpcFailure(fmt.Sprintf("Tool '%s'", name), data); err != nil {
		return nil, err
	}
	result := data["result"]
	if r, ok := result.(map[string]any); ok {
		if d, ok := r["data"]; ok {
			return d, nil
		}
	}
	return result, nil
}

// Close is close(): openenv/session/close for the session, if one was
// made.
func (m *MCPClient) Close() error {
	if m.SessionID == "" {
		return nil
	}
	data, err := m.Request("openenv/session/close", map[string]any{"session_id": m.SessionID})
	m.SessionID = ""
	if err != nil {
		return err
	}
	return rpcFailure("close", data)
}
