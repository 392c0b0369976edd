package serve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// envClient is an OpenEnv client written for these tests from OpenEnv's
// protocol as its code has it (openenv.core.env_client.EnvClient and
// GenericEnvClient, env_server/types.py), not from forkline's server: it
// speaks to ws://HOST/ws with another WebSocket implementation (gorilla's)
// and reads every answer as untyped JSON.
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
type envClient struct {
	conn    *websocket.Conn
	timeout time.Duration // EnvClient's message_timeout_s
}

// stepResult is OpenEnv's StepResult.
type stepResult struct {
	Observation map[string]any
	Reward      *float64
	Done        bool
}

// serverError is what EnvClient raises for an error answer.
type serverError struct {
	Message string
	Code    string
	Data    map[string]any
}

func (e *serverError) Error() string {
	return fmt.Sprintf("Server error: %s (code: %s)", e.Message, e.Code)
}

// dial converts base (http://...) to ws://.../ws as EnvClient does.
func dial(base string) (*envClient, error) {
	url := "ws" + strings.TrimPrefix(base, "http") + "/ws"
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	conn, _, err := d.Dial(url, nil)
	if err != nil {
		return nil, fmt.Errorf("Failed to connect to %s: %w", url, err)
	}
	return &envClient{conn: conn, timeout: 60 * time.Second}, nil
}

func (c *envClient) sendAndReceive(msg map[string]any) (map[string]any, error) {
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	return c.sendRaw(b)
}

// sendRaw sends bytes as they are (to test what a broken client sends).
func (c *envClient) sendRaw(b []byte) (map[string]any, error) {
	if err := c.conn.WriteMessage(websocket.TextMessage, b); err != nil {
		return nil, err
	}
	return c.receive()
}

func (c *envClient) receive() (map[string]any, error) {
	c.conn.SetReadDeadline(time.Now().Add(c.timeout))
	_, raw, err := c.conn.ReadMessage()
	if err != nil {
		return nil, err
	}
	var resp map[string]any
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, fmt.Errorf("answer is not JSON: %w: %s", err, raw)
	}
	if resp["type"] == "error" {
		data, _ := resp["data"].(map[string]any)
		msg, _ := data["message"].(string)
		code, _ := data["code"].(string)
		return resp, &serverError{Message: msg, Code: code, Data: data}
	}
	return resp, nil
}

func parseResult(resp map[string]any) stepResult {
	data, _ := resp["data"].(map[string]any)
	r := stepResult{}
	r.Observation, _ = data["observation"].(map[string]any)
	if v, ok := data["reward"].(float64); ok {
		r.Reward = &v
	}
	r.Done, _ = data["done"].(bool)
	return r
}

func (c *envClient) reset(kwargs map[string]any) (stepResult, error) {
	if kwargs == nil {
		kwargs = map[string]any{}
	}
	resp, err := c.sendAndReceive(map[string]any{"type": "reset", "data": kwargs})
	if err != nil {
		return stepResult{}, err
	}
	if resp["type"] != "observation" {
		return stepResult{}, fmt.Errorf("reset answered %v", resp["type"])
	}
	return parseResult(resp), nil
}

func (c *envClient) step(action map[string]any) (stepResult, error) {
	resp, err := c.sendAndReceive(map[string]any{"type": "step", "data": action})
	if err != nil {
		return stepResult{}, err
	}
	if resp["type"] != "observation" {
		return stepResult{}, fmt.Errorf("step answered %v", resp["type"])
	}
	return parseResult(resp), nil
}

func (c *envClient) state() (map[string]any, error) {
	resp, err := c.sendAndReceive(map[string]any{"type": "state"})
	if err != nil {
		return nil, err
	}
	if resp["type"] != "state" {
		return nil, fmt.Errorf("state answered %v", resp["type"])
	}
	data, _ := resp["data"].(map[string]any)
	return data, nil
}

// disconnect is EnvClient.disconnect: a close message, then the socket's
// close handshake.
func (c *envClient) disconnect() {
	b, _ := json.Marshal(map[string]any{"type": "close"})
	c.conn.WriteMessage(websocket.TextMessage, b)
	c.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.conn.Close()
}

// drop closes the TCP connection with no close message or frame: a
// trainer process that died.
func (c *envClient) drop() { c.conn.UnderlyingConn().Close() }

// waitClosed reads until the server closes the connection and returns the
// close frame's code and text (-1 when the connection ended without one).
func (c *envClient) waitClosed(within time.Duration) (int, string, error) {
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

// httpJSON is a one-shot HTTP call: method, path, body (nil for none);
// the status and the decoded answer.
func httpJSON(method, url string, body any) (int, map[string]any, error) {
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
		return resp.StatusCode, nil, fmt.Errorf("answer is not a JSON object: %w: %s", err, raw)
	}
	return resp.StatusCode, out, nil
}
