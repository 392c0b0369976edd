// Package vllmsim is a loopback HTTP server that behaves like vLLM serving
// Qwen3 (or another pinned model) with the model's real chat template and
// real tokenizer, through internal/oracle: it prepares each chat request the
// way vLLM does, renders it with Python's Jinja2, tokenizes the prompt with
// the real tokenizer, and answers from a script of replies (the test says
// what text the "model" generates), tokenized by the same tokenizer and
// ended by the stop token as vLLM ends them, with deterministic fabricated
// logprobs. Replies go through vLLM's qwen3 reasoning parser and hermes tool
// parser when those are switched on.
//
// Endpoints: GET /v1/models; POST /v1/chat/completions, /tokenize,
// /detokenize, /v1/completions (prompt as token ids or text); SGLang's POST
// /generate (input_ids); and, behind Config.EnableScaleOut (off by default,
// as in recent vLLM, so clients must probe), /v1/chat/completions/render,
// /v1/completions/render, /inference/v1/generate and
// /v1/chat/completions/derender. Every request is logged (Requests) with
// what the server rendered and generated, for assertions.
//
// Behaviour follows vLLM's and SGLang's source; comments name the files.
// Streaming is not served (a stream request is refused with 400).
//
// The package knows the wire formats and the oracle, not forkline's
// runtime or policies. It is for tests only; it listens on 127.0.0.1.
package vllmsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkline/forkline/internal/oracle"
)

// Config is the simulated deployment: `vllm serve MODEL` and its flags.
type Config struct {
	// Model is the served model name (default "Qwen/Qwen3-8B"); requests
	// naming another model get 404.
	Model string
	// Template is the oracle's chat template (default "qwen3").
	Template string
	// Tokenizer is the oracle's tokenizer (default "qwen3").
	Tokenizer string
	// StopToken ends every generation (default "<|im_end|>", Qwen3's
	// generation_config eos).
	StopToken string
	// MaxModelLen is --max-model-len (default 40960, Qwen3's context).
	MaxModelLen int
	// ContentFormat is --chat-template-content-format (default
	// ContentString, what vLLM detects for Qwen3's template).
	ContentFormat ContentFormat
	// ImageTokens, when set, is what a Gemma 3 deployment's multimodal
	// processor does to a rendered prompt before it is tokenized: each
	// <start_of_image> the template wrote for an image becomes
	// "\n\n<start_of_image>", ImageTokens × <image_soft_token> and
	// "<end_of_image>\n\n" (transformers' Gemma3Processor
	// full_image_sequence, 256 tokens for Gemma 3, which vLLM's gemma3_mm
	// applies), so prompt_token_ids count the image placeholders as vLLM's
	// do. The pixels are not looked at.
	ImageTokens int
	// ReasoningParser is --reasoning-parser qwen3: the think block moves to
	// message.reasoning.
	ReasoningParser bool
	// ReasoningField names the response field of the reasoning: "reasoning"
	// (vLLM ≥ 0.11, the default) or "reasoning_content" (before). Requests
	// are read either way: vLLM renames a message's reasoning_content to
	// reasoning.
	ReasoningField string
	// ToolParser is --enable-auto-tool-choice --tool-call-parser hermes.
	ToolParser bool
	// DefaultChatTemplateKwargs is --default-chat-template-kwargs; a
	// request's chat_template_kwargs override it key by key.
	DefaultChatTemplateKwargs map[string]any
	// EnableScaleOut serves the render, derender and token-generate
	// routes (vLLM's --enable-scale-out); without it they are 404, as in
	// vLLM after v0.28.
	EnableScaleOut bool
	// APIKey is vLLM's --api-key: requests to the guarded routes (paths
	// under /v1, /v2, /inference and /cohere) without "Authorization:
	// Bearer KEY" get 401 {"error": "Unauthorized"}; the others (/tokenize,
	// /detokenize, /generate) are open, as in vLLM's authentication
	// middleware.
	APIKey string
	// ServeProps answers GET /props the way llama.cpp's server does, with
	// the chat template it renders with (vLLM and SGLang report none), for
	// clients that record which template produced their prompts.
	ServeProps bool
	// OwnedBy is what GET /v1/models names as the models' owner: "vllm"
	// (the default), or "sglang" to stand for an SGLang server, which
	// names itself so.
	OwnedBy string
	// Respond says what the model generates for each generation request.
	Respond Responder
}

// Reply is what the model generates in one turn.
type Reply struct {
	// Text is the generated text before the stop token.
	Text string
	// NonCanonical generates Text with a non-canonical token split (one
	// token replaced by two that spell the same), as a sampling model may:
	// the text is the same, its re-tokenization is not.
	NonCanonical bool
	// OmitTokenIDs answers this generation without token ids (no
	// token_ids, prompt_token_ids or output_ids, whatever the request
	// asked), as a server without return_token_ids or a proxy that drops
	// the field does; logprobs are still answered when asked for.
	OmitTokenIDs bool
}

// Turn is what a Responder is told about one generation request.
type Turn struct {
	Index     int    // 0 for the first generation request the server answers
	Endpoint  string // "/v1/chat/completions", "/v1/completions", "/generate", ...
	Prompt    string // the rendered chat prompt, or the prompt ids decoded
	PromptIDs []int32
	Body      json.RawMessage // the request as received
}

// Responder gives the reply for one generation request; an error is
// answered as a 500. The server calls it from concurrent requests.
type Responder func(Turn) (Reply, error)

// Replies answers the generation requests in order with rs; past the last
// one it fails.
func Replies(rs ...Reply) Responder {
	var mu sync.Mutex
	next := 0
	return func(Turn) (Reply, error) {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(rs) {
			return Reply{}, fmt.Errorf("vllmsim: the script has %d replies and request %d asked for another", len(rs), next+1)
		}
		next++
		return rs[next-1], nil
	}
}

// Received is one request the server answered, for assertions.
type Received struct {
	Method, Path string
	Header       http.Header
	Body         json.RawMessage
	Status       int
	Response     json.RawMessage

	// For requests that render a chat: the conversation and tools exactly
	// as passed to the template, the template variables, and the render.
	Messages       json.RawMessage
	Tools          json.RawMessage
	TemplateKwargs map[string]any
	Prompt         string
	// PromptIDs are the prompt's token ids (chat, tokenize and
	// token-prompt requests).
	PromptIDs []int32
	// For generation requests: the scripted reply and the ids generated
	// (the stop token included when generation stopped on it).
	Reply        *Reply
	GeneratedIDs []int32
	// Warnings are what vLLM would log for this request, such as fields
	// it ignores ("The following fields were present in the request but
	// ignored: ...").
	Warnings []string
}

// Server is a running simulator.
type Server struct {
	// URL is the base URL, http://127.0.0.1:PORT (no /v1).
	URL string

	cfg   Config
	http  *httptest.Server
	stop  int32
	mu    sync.Mutex
	log   []Received
	turns int
	ids   int
}

// Start starts a server for the test and closes it when the test ends. It
// calls oracle.Require first (skip or fail when the oracle is missing) and
// loads the template and tokenizer up front.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	oracle.Require(t)
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// New starts a server; Close stops it.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Model == "" {
		cfg.Model = "Qwen/Qwen3-8B"
	}
	if cfg.Template == "" {
		cfg.Template = "qwen3"
	}
	if cfg.Tokenizer == "" {
		cfg.Tokenizer = "qwen3"
	}
	if cfg.StopToken == "" {
		cfg.StopToken = "<|im_end|>"
	}
	if cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = 40960
	}
	if cfg.ContentFormat == "" {
		cfg.ContentFormat = ContentString
	}
	switch cfg.ReasoningField {
	case "":
		cfg.ReasoningField = "reasoning"
	case "reasoning", "reasoning_content":
	default:
		return nil, fmt.Errorf("vllmsim: ReasoningField %q: want reasoning or reasoning_content", cfg.ReasoningField)
	}
	if cfg.Respond == nil {
		cfg.Respond = Replies()
	}
	if cfg.OwnedBy == "" {
		cfg.OwnedBy = "vllm"
	}
	if _, err := oracle.TemplateSource(ctx, cfg.Template); err != nil {
		return nil, err
	}
	stop, err := oracle.TokenID(ctx, cfg.Tokenizer, cfg.StopToken)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, stop: stop}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", s.handle(s.models))
	mux.HandleFunc("POST /v1/chat/completions", s.handle(s.chatCompletions))
	mux.HandleFunc("POST /tokenize", s.handle(s.tokenize))
	mux.HandleFunc("POST /detokenize", s.handle(s.detokenize))
	mux.HandleFunc("POST /v1/completions", s.handle(s.completions))
	mux.HandleFunc("POST /generate", s.handle(s.sglangGenerate))
	if cfg.EnableScaleOut {
		mux.HandleFunc("POST /v1/chat/completions/render", s.handle(s.chatRender))
		mux.HandleFunc("POST /v1/completions/render", s.handle(s.completionsRender))
		mux.HandleFunc("POST /inference/v1/generate", s.handle(s.tokensGenerate))
		mux.HandleFunc("POST /v1/chat/completions/derender", s.handle(s.chatDerender))
	}
	if cfg.ServeProps {
		mux.HandleFunc("GET /props", s.handle(s.props))
	}
	mux.HandleFunc("/", s.handle(func(ctx context.Context, r *Received) (any, error) {
		return nil, &httpError{status: http.StatusNotFound, body: map[string]any{"detail": "Not Found"}}
	}))
	s.http = httptest.NewServer(mux) // httptest listens on 127.0.0.1
	s.URL = s.http.URL
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { s.http.Close() }

// Config returns the server's configuration with defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Requests returns the requests answered so far, in order.
func (s *Server) Requests() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.log...)
}

// Last returns the last request answered on path ("" for any).
func (s *Server) Last(path string) (Received, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.log) - 1; i >= 0; i-- {
		if path == "" || s.log[i].Path == path {
			return s.log[i], true
		}
	}
	return Received{}, false
}

// httpError is an answer other than 200.
type httpError struct {
	status int
	body   any
}

func (e *httpError) Error() string { return fmt.Sprintf("status %d: %v", e.status, e.body) }

// apiError is vLLM's ErrorResponse in OpenAI's shape
// (vllm/entrypoints/openai/engine/protocol.py ErrorResponse/ErrorInfo).
func apiError(status int, typ, message, param string) *httpError {
	var p any
	if param != "" {
		p = param
	}
	return &httpError{status: status, body: map[string]any{
		"error": map[string]any{"message": message, "type": typ, "param": p, "code": status},
	}}
}

func badRequest(format string, args ...any) *httpError {
	return apiError(http.StatusBadRequest, "BadRequestError", fmt.Sprintf(format, args...), "")
}

// guardedPrefixes are the paths vLLM's authentication middleware checks
// (vllm/entrypoints/serve/middleware/authenticate.py GUARDED_PREFIX).
var guardedPrefixes = []string{"/v1", "/v2", "/inference", "/cohere"}

func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.APIKey == "" || r.Method == http.MethodOptions {
		return true
	}
	guarded := false
	for _, p := range guardedPrefixes {
		guarded = guarded || strings.HasPrefix(r.URL.Path, p)
	}
	scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return !guarded || (strings.EqualFold(scheme, "bearer") && key == s.cfg.APIKey)
}

// props is llama.cpp's GET /props, reduced to what clients read.
func (s *Server) props(ctx context.Context, r *Received) (any, error) {
	tmpl, err := oracle.TemplateSource(ctx, s.cfg.Template)
	if err != nil {
		return nil, err
	}
	return map[string]any{"chat_template": tmpl, "model_alias": s.cfg.Model, "build_info": "vllmsim"}, nil
}

func (s *Server) handle(fn func(context.Context, *Received) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		rec := &Received{Method: r.Method, Path: r.URL.Path, Body: body, Header: r.Header.Clone()}
		serve := fn
		if !s.authorized(r) {
			serve = func(context.Context, *Received) (any, error) {
				return nil, &httpError{status: http.StatusUnauthorized, body: map[string]any{"error": "Unauthorized"}}
			}
		}
		out, err := serve(r.Context(), rec)
		status := http.StatusOK
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) {
				he = apiError(http.StatusInternalServerError, "InternalServerError", err.Error(), "")
			}
			status, out = he.status, he.body
		}
		resp, merr := encode(out)
		if merr != nil {
			status, resp = http.StatusInternalServerError, []byte(fmt.Sprintf(`{"error":{"message":%q}}`, merr.Error()))
		}
		rec.Status, rec.Response = status, resp
		s.mu.Lock()
		s.log = append(s.log, *rec)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(resp)
	}
}

func (s *Server) nextID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids++
	return fmt.Sprintf("%s-%d", prefix, s.ids)
}

// checkModel is vLLM's _check_model: a request may omit the model; a named
// one must be served.
func (s *Server) checkModel(req object) error {
	v, ok := req.get("model")
	if !ok || isNull(v) {
		return nil
	}
	name, _, err := str(v)
	if err != nil || name != s.cfg.Model {
		return apiError(http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", strings.Trim(string(v), `"`)), "model")
	}
	return nil
}

func (s *Server) models(ctx context.Context, r *Received) (any, error) {
	return map[string]any{
		"object": "list",
		"data": []any{map[string]any{
			"id": s.cfg.Model, "object": "model", "created": time.Now().Unix(), "owned_by": s.cfg.OwnedBy,
			"root": s.cfg.Model, "parent": nil, "max_model_len": s.cfg.MaxModelLen,
		}},
	}, nil
}

// decodeRequest parses the body as an object and checks the model.
func (s *Server) decodeRequest(r *Received) (object, error) {
	req, err := parseObject(r.Body)
	if err != nil {
		return nil, badRequest("the request body is not a JSON object: %v", err)
	}
	if err := s.checkModel(req); err != nil {
		return nil, err
	}
	return req, nil
}

// field decodes req[key] into out when present and not null.
func field(req object, key string, out any) error {
	v, ok := req.get(key)
	if !ok || isNull(v) {
		return nil
	}
	if err := json.Unmarshal(v, out); err != nil {
		return badRequest("%s: %v", key, err)
	}
	return nil
}

// ignoredFields is what vLLM logs for fields its request model does not
// declare ("The following fields were present in the request but ignored").
func ignoredFields(req object, known map[string]bool) []string {
	var extra []string
	for _, m := range req {
		if !known[m.key] {
			extra = append(extra, m.key)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("The following fields were present in the request but ignored: {%s}", quoteList(extra))}
}

func quoteList(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = "'" + k + "'"
	}
	return strings.Join(q, ", ")
}

// encode writes v without HTML escaping (FastAPI's JSONResponse does not
// escape either).
func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
