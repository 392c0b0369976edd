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
}

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
	if err != nil {
		return 0, nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("openenvtest: answer is not a JSON object: %w: %s", err, raw)
	}
	return resp.StatusCode, out, nil
}
