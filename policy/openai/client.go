package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/forkline/forkline/runtime"
)

// The wire shapes of /v1/chat/completions, with the token fields of vLLM and
// SGLang (see FORMATS.md §5). Only what the policy sends or reads is here.

type chatMessage struct {
	Role string `json:"role"`
	// Content is a pointer so that an assistant message that only calls a
	// tool sends null, as OpenAI does.
	Content *string `json:"content"`
	// Parts, when set, is sent as the content instead: a list of OpenAI
	// content parts ({"type": "text", ...}, {"type": "image_url", ...}).
	// Every message path (chat requests, token-in-token-out renders) sends
	// messages through this type, so a turn that carries images renders
	// the same way as one that carries text.
	Parts []json.RawMessage `json:"-"`
	// Reasoning or ReasoningContent carries an assistant turn's reasoning
	// back, in the field the server returned it in (vLLM: reasoning; SGLang,
	// DeepSeek and older vLLM: reasoning_content).
	Reasoning        *string    `json:"reasoning,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
}

// MarshalJSON writes content as Parts when set, else as Content (null when
// nil).
func (m chatMessage) MarshalJSON() ([]byte, error) {
	type plain chatMessage
	if m.Parts == nil {
		return json.Marshal(plain(m))
	}
	return json.Marshal(struct {
		plain
		Content []json.RawMessage `json:"content"`
	}{plain(m), m.Parts})
}

type toolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"`
	Function toolCallFunc `json:"function"`
}

type toolCallFunc struct {
	Name string `json:"name"`
	// Arguments is kept as the server sent it (normally a JSON string) and
	// sent back unchanged, so the chat template re-renders what the model
	// produced.
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

type chatRequest struct {
	Model       string            `json:"model,omitempty"`
	Messages    []chatMessage     `json:"messages"`
	Tools       []json.RawMessage `json:"tools,omitempty"`
	Temperature *float64          `json:"temperature,omitempty"`
	TopP        *float64          `json:"top_p,omitempty"`
	MaxTokens   int               `json:"max_tokens,omitempty"`
	Seed        *int64            `json:"seed,omitempty"`
	Logprobs    bool              `json:"logprobs,omitempty"`
	TopLogprobs *int              `json:"top_logprobs,omitempty"`
	// vLLM ≥ 0.10.2 and SGLang: token ids of the prompt and the response.
	ReturnTokenIDs bool `json:"return_token_ids,omitempty"`
	// SGLang: prompt ids per choice. Sent only to servers that may be
	// SGLang: vLLM logs a warning for it on every request.
	ReturnPromptTokenIDs bool `json:"return_prompt_token_ids,omitempty"`
	// vLLM and SGLang: extra chat template variables.
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
}

type chatResponse struct {
	Model string `json:"model"`
	// vLLM puts the prompt ids at the top level.
	PromptTokenIDs []int32      `json:"prompt_token_ids"`
	Choices        []chatChoice `json:"choices"`
	Usage          *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

type chatChoice struct {
	Message      chatChoiceMessage `json:"message"`
	FinishReason string            `json:"finish_reason"`
	TokenIDs     []int32           `json:"token_ids"`
	// SGLang puts the prompt ids in each choice.
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	Logprobs       *struct {
		Content []struct {
			Token   string  `json:"token"`
			Logprob float64 `json:"logprob"`
		} `json:"content"`
	} `json:"logprobs"`
}

type chatChoiceMessage struct {
	Content          *string    `json:"content"`
	Reasoning        *string    `json:"reasoning"`         // vLLM
	ReasoningContent *string    `json:"reasoning_content"` // SGLang, DeepSeek and older vLLM
	ToolCalls        []toolCall `json:"tool_calls"`
}

// ErrRetriesExhausted is wrapped by the error Decide returns when a request
// failed in a retryable way (429, 5xx, timeout, broken connection) on every
// attempt. When the last attempt found nothing listening at the address
// (connection refused, no route, a name that does not resolve), the error
// wraps runtime.ErrUnavailable too; an HTTP error from a live server never
// does.
var ErrRetriesExhausted = errors.New("openai: retries exhausted")

// ErrBadResponse is wrapped when the server answered 2xx with something that
// is not what was asked for (undecodable JSON, a chat completion without
// choices, a token endpoint's answer without ids). It is not retried.
var ErrBadResponse = errors.New("openai: not the answer asked for")

// StatusError is a non-2xx answer. Body holds the start of the answer's body
// with the API key, should a server echo it, replaced by [redacted].
type StatusError struct {
	// Path is the request's method and URL path ("POST /tokenize").
	Path string
	Code int
	Body string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("openai: server answered %d %s", e.Code, http.StatusText(e.Code))
	if e.Path != "" {
		msg = fmt.Sprintf("openai: %s: server answered %d %s", e.Path, e.Code, http.StatusText(e.Code))
	}
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Retryable reports whether the status is one worth repeating: 429 and 5xx.
// Other 4xx mean the request itself is wrong and are never repeated.
func (e *StatusError) Retryable() bool { return e.Code == http.StatusTooManyRequests || e.Code >= 500 }

// attemptError is a failed attempt that is worth repeating.
type attemptError struct {
	err        error
	retryAfter time.Duration // the server's Retry-After, if any
	// unreachable: nothing answered at the server's address at all (see
	// unreachable).
	unreachable bool
}

func (e *attemptError) Error() string { return e.err.Error() }
func (e *attemptError) Unwrap() error { return e.err }

// maxBody bounds what is read of one answer.
const maxBody = 256 << 20

// defaultHTTP is shared by every policy without its own client, so episodes
// reuse connections. Attempts are bounded by contexts, not by the client.
//
// Its transport keeps every idle connection to a server, not Go's default
// of two per host: a run of N replicas has up to N requests in flight to
// one model server, and with two kept, each answer but two closed its
// connection and the next request dialled a new one: a connect and a
// socket left in TIME_WAIT a step, a round trip more to a remote server,
// and at 256 replicas against a loopback server 0.22 s of the collector's
// 4.1 s of CPU in dialling (0.03 s now). The idle ones still close after
// the default 90 s.
var defaultHTTP = &http.Client{Transport: keepAllIdle()}

func keepAllIdle() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no limit across hosts
	t.MaxIdleConnsPerHost = maxIdlePerHost
	return t
}

// maxIdlePerHost bounds the idle connections kept to one server: more than
// the replicas a machine runs.
const maxIdlePerHost = 4096

// client sends requests to the model server (and to a separate renderer,
// when one is configured) with retries.
type client struct {
	url     string // the chat completions URL
	urls    serverURLs
	render  serverURLs // where chat templates are rendered: urls unless render_url is set
	cfg     Config
	http    *http.Client
	sleep   func(ctx context.Context, d time.Duration) error
	jitter  func(n int64) int64
	keyHost string // the only scheme://host the API key is sent to
}

func newClient(cfg Config) (*client, error) {
	urls, err := parseServerURL(cfg.BaseURL, "base_url")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOption, err)
	}
	render := urls
	if cfg.RenderURL != "" {
		if render, err = parseServerURL(cfg.RenderURL, "render_url"); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrOption, err)
		}
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = defaultHTTP
	}
	return &client{url: urls.api("/chat/completions"), urls: urls, render: render, cfg: cfg, http: hc,
		sleep: sleepCtx, jitter: rand.Int64N, keyHost: urls.host}, nil
}

// result is one successful answer and what it took.
type result struct {
	resp     *chatResponse
	latency  time.Duration // of the attempt that answered
	attempts int
}

// complete sends a chat completion request (see do).
func (c *client) complete(ctx context.Context, req *chatRequest) (result, error) {
	var resp chatResponse
	ans, err := c.do(ctx, http.MethodPost, c.url, req, &resp, func() error {
		if len(resp.Choices) == 0 {
			return errors.New("no choices")
		}
		return nil
	})
	if err != nil {
		return result{}, err
	}
	return result{resp: &resp, latency: ans.latency, attempts: ans.attempts}, nil
}

// answer is what one successful request took.
type answer struct {
	latency  time.Duration // of the attempt that answered
	attempts int
}

// do sends one request (body encoded as JSON; nil for none) and decodes a
// 2xx answer into out, then runs check on it (nil for none); a failed check
// is an ErrBadResponse, never retried. Retryable failures (429, 5xx,
// timeouts, broken connections) are repeated with exponential backoff and
// jitter; do gives up at once when ctx ends.
func (c *client) do(ctx context.Context, method, url string, body, out any, check func() error) (answer, error) {
	var data []byte
	if body != nil {
		var err error
		if data, err = marshalNoEscape(body); err != nil {
			return answer{}, fmt.Errorf("openai: encoding the request: %w", err)
		}
	}
	for attempt := 0; ; attempt++ {
		latency, err := c.once(ctx, method, url, data, out, check)
		if err == nil {
			return answer{latency: latency, attempts: attempt + 1}, nil
		}
		if ctx.Err() != nil {
			return answer{}, fmt.Errorf("openai: request abandoned: %w", ctx.Err())
		}
		var ae *attemptError
		if !errors.As(err, &ae) {
			return answer{}, err
		}
		if attempt >= c.cfg.Retries {
			err := fmt.Errorf("%w after %d attempts: %w", ErrRetriesExhausted, attempt+1, ae.err)
			if ae.unreachable {
				// The last attempt found nothing at the address: the
				// server is gone, which is the run's failure, not the
				// episode's (runtime.ErrUnavailable).
				err = &unavailableError{err}
			}
			return answer{}, err
		}
		d := c.backoff(attempt, ae.retryAfter)
		if c.cfg.Logf != nil {
			c.cfg.Logf("%v; retry %d of %d in %s", ae.err, attempt+1, c.cfg.Retries, d.Round(time.Millisecond))
		}
		if err := c.sleep(ctx, d); err != nil {
			return answer{}, fmt.Errorf("openai: request abandoned: %w", err)
		}
	}
}

// backoff is the wait before retry attempt+1: Backoff·2^attempt capped at
// BackoffMax, with equal jitter (half fixed, half random) so that replicas
// hitting the same limit spread out; a longer Retry-After from the server is
// honoured up to BackoffMax.
func (c *client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := c.cfg.BackoffMax
	if attempt < 32 {
		if e := c.cfg.Backoff << attempt; e > 0 && e < d {
			d = e
		}
	}
	d = d/2 + time.Duration(c.jitter(int64(d/2)+1))
	if retryAfter > d {
		d = min(retryAfter, c.cfg.BackoffMax)
	}
	return d
}

// once makes one attempt. Retryable failures come back as *attemptError.
func (c *client) once(ctx context.Context, method, url string, body []byte, out any, check func() error) (time.Duration, error) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(actx, method, url, rd)
	if err != nil {
		return 0, fmt.Errorf("openai: %w", err)
	}
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	hreq.Header.Set("Accept", "application/json")
	key := os.Getenv(c.cfg.APIKeyEnv)
	if key != "" && sameHost(url, c.keyHost) {
		// The key belongs to base_url's server; a separate renderer
		// (render_url on another host) never gets it.
		hreq.Header.Set("Authorization", "Bearer "+key)
	}
	began := time.Now()
	hres, err := c.http.Do(hreq)
	if err != nil {
		return 0, c.transportError(ctx, actx, err, key)
	}
	defer hres.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hres.Body, maxBody))
	latency := time.Since(began)
	if err != nil {
		return 0, c.transportError(ctx, actx, err, key)
	}
	if hres.StatusCode < 200 || hres.StatusCode > 299 {
		se := &StatusError{Path: method + " " + hreq.URL.Path, Code: hres.StatusCode, Body: snippet(data, key)}
		if se.Retryable() {
			return 0, &attemptError{err: se, retryAfter: retryAfter(hres.Header)}
		}
		return 0, se
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return 0, fmt.Errorf("%w: %s %s: %v: %s", ErrBadResponse, method, hreq.URL.Path, err, snippet(data, key))
		}
	}
	if check != nil {
		if err := check(); err != nil {
			return 0, fmt.Errorf("%w: %s %s: %v: %s", ErrBadResponse, method, hreq.URL.Path, err, snippet(data, key))
		}
	}
	return latency, nil
}

// transportError classifies a failure to get an answer: the caller's
// cancellation is final; an attempt timeout or a broken connection is worth
// repeating.
func (c *client) transportError(ctx, actx context.Context, err error, key string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if actx.Err() != nil {
		return &attemptError{err: fmt.Errorf("openai: no answer within %s", c.cfg.Timeout)}
	}
	return &attemptError{err: fmt.Errorf("openai: %s", redact(err.Error(), key)), unreachable: unreachable(err)}
}

// unreachable reports whether a transport error means that nothing could be
// reached at the server's address at all: the connection was refused, there
// is no route to the host or its network, or the host name does not
// resolve. A timed-out attempt, a connection broken mid-answer or any HTTP
// status is not: those come from a server that is there.
func unreachable(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// unavailableError is a request that found no server at its address on any
// attempt up to the last: it wraps runtime.ErrUnavailable, so a collector
// stops scheduling instead of recording the episode as a policy_error.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string {
	return e.err.Error() + " (the model server cannot be reached)"
}
func (e *unavailableError) Unwrap() []error { return []error{e.err, runtime.ErrUnavailable} }

// retryAfter reads a Retry-After header in seconds or as an HTTP date.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}

// snippet is the start of a body for an error message, key redacted.
func snippet(b []byte, key string) string {
	const limit = 512
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	s = redact(s, key)
	if len(s) > limit {
		cut := limit
		for cut > 0 && (s[cut]&0xC0) == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// redact removes the API key from text that may reach a dataset or a log.
func redact(s, key string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, "[redacted]")
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
