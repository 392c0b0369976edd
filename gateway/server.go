package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Config configures a Server. The zero value takes the defaults.
type Config struct {
	// Models are the model names GET /v1/models lists (the names the
	// harnesses are told to use); "forkline" when empty.
	Models []string
	// MaxRequestBytes bounds a request body; DefaultMaxRequestBytes when 0.
	// A larger one is refused (413) and its episode told.
	MaxRequestBytes int64
	// KeepAlive is how often a streaming call waiting for the model gets
	// an SSE comment; DefaultKeepAlive when 0.
	KeepAlive time.Duration
}

// Defaults.
const (
	// DefaultMaxRequestBytes holds a long agent conversation: a harness
	// sends its whole history, tool definitions included, every call.
	DefaultMaxRequestBytes = 32 << 20
	DefaultKeepAlive       = 10 * time.Second
)

// CredentialPrefix starts every credential Register hands out.
const CredentialPrefix = "fkl-ep-"

// Server is a gateway. Serve it on as many listeners as needed (a loopback
// port, a unix socket); Register an episode's Handler before its harness
// starts and call the returned function once it ended.
type Server struct {
	cfg Config
	mu  sync.RWMutex
	eps map[string]Handler // credential → the episode's handler
}

// New returns a gateway with cfg.
func New(cfg Config) *Server {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if len(cfg.Models) == 0 {
		cfg.Models = []string{"forkline"}
	}
	return &Server{cfg: cfg, eps: map[string]Handler{}}
}

// Register makes h the handler of the calls that carry the returned
// credential (a fresh random one) until unregister is called.
func (s *Server) Register(h Handler) (credential string, unregister func()) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("gateway: no randomness: " + err.Error())
	}
	credential = CredentialPrefix + hex.EncodeToString(b[:])
	s.mu.Lock()
	s.eps[credential] = h
	s.mu.Unlock()
	var once sync.Once
	return credential, func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.eps, credential)
			s.mu.Unlock()
		})
	}
}

// Serve answers on l until it is closed; like http.Server.Serve it returns
// a non-nil error (http.ErrServerClosed after Close).
func (s *Server) Serve(l net.Listener) error {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	return srv.Serve(l)
}

// Routes the gateway answers, for the 404 that names them.
const routes = "POST /v1/messages, POST /v1/messages/count_tokens, POST /v1/responses, POST /v1/chat/completions, GET /v1/models"

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	anthropic := r.Header.Get("anthropic-version") != "" || strings.HasPrefix(path, "/v1/messages")
	api := APIChat
	switch {
	case strings.HasPrefix(path, "/v1/messages"):
		api = APIMessages
	case path == "/v1/responses":
		api = APIResponses
	}
	h, ok := s.handler(r)
	if !ok {
		writeError(w, api, &Error{Status: http.StatusUnauthorized, Type: "authentication_error",
			Message: "forkline gateway: no episode has this API key (it is made for one episode and ends with it)"})
		return
	}
	switch {
	case r.Method == http.MethodGet && path == "/v1/models":
		s.models(w, anthropic)
	case r.Method == http.MethodPost && path == "/v1/messages":
		s.call(w, r, h, APIMessages, decodeMessages, writeMessages)
	case r.Method == http.MethodPost && path == "/v1/messages/count_tokens":
		s.countTokens(w, r, h)
	case r.Method == http.MethodPost && path == "/v1/responses":
		s.call(w, r, h, APIResponses, decodeResponses, writeResponses)
	case r.Method == http.MethodPost && path == "/v1/chat/completions":
		s.call(w, r, h, APIChat, decodeChat, writeChat)
	default:
		err := &Error{Status: http.StatusNotFound, Type: "not_found_error",
			Message: fmt.Sprintf("forkline gateway: no route %s %s (it answers %s)", r.Method, r.URL.Path, routes)}
		h.Refused(api, noRoute{err})
		writeError(w, api, err)
	}
}

// handler is the episode whose credential r carries.
func (s *Server) handler(r *http.Request) (Handler, bool) {
	key := r.Header.Get("x-api-key")
	if key == "" {
		key = r.Header.Get("api-key")
	}
	if key == "" {
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			key = strings.TrimSpace(v)
		}
	}
	if !strings.HasPrefix(key, CredentialPrefix) {
		return nil, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, ok := s.eps[key]
	return h, ok
}

// body reads a request body within the bound; an error is the answer.
func (s *Server) body(r *http.Request) ([]byte, *Error) {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return nil, &Error{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error",
			Message: fmt.Sprintf("forkline gateway: request bodies encoded %q are not read; send them uncompressed", ce)}
	}
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, s.cfg.MaxRequestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &Error{Status: http.StatusRequestEntityTooLarge, Type: "request_too_large",
				Message: fmt.Sprintf("forkline gateway: the request is over %d bytes", s.cfg.MaxRequestBytes)}
		}
		return nil, &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "forkline gateway: reading the request: " + err.Error()}
	}
	return data, nil
}

// decoder translates a request body of one API into a Call.
type decoder func(body []byte) (*Call, error)

// writer answers a Call in its API: the reply, or after a stream's headers
// went out the API's error event (err).
type writer func(st *stream, c *Call, rep *Reply, err error)

// call answers one model call: decode, hand to h (with keep-alives on a
// stream), encode.
func (s *Server) call(w http.ResponseWriter, r *http.Request, h Handler, api string, dec decoder, enc writer) {
	data, herr := s.body(r)
	if herr != nil {
		h.Refused(api, refusal{herr})
		writeError(w, api, herr)
		return
	}
	c, err := dec(data)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = untranslatable("%v", err)
		}
		h.Refused(api, refusal{e})
		writeError(w, api, e)
		return
	}
	c.API = api
	if !c.Stream {
		rep, err := h.Call(r.Context(), c)
		if err != nil {
			writeError(w, api, asError(err))
			return
		}
		enc(&stream{w: w}, c, rep, nil)
		return
	}
	st := startStream(w)
	type result struct {
		rep *Reply
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := h.Call(r.Context(), c)
		done <- result{rep, err}
	}()
	tick := time.NewTicker(s.cfg.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case res := <-done:
			enc(st, c, res.rep, res.err)
			return
		case <-tick.C:
			st.comment("keep-alive")
		}
	}
}

// countTokens answers POST /v1/messages/count_tokens.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request, h Handler) {
	data, herr := s.body(r)
	if herr != nil {
		writeError(w, APIMessages, herr)
		return
	}
	tc, ok := h.(TokenCounter)
	if !ok {
		writeError(w, APIMessages, &Error{Status: http.StatusNotFound, Type: "not_found_error", Message: "forkline gateway: this run does not count tokens"})
		return
	}
	c, err := decodeMessages(data)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = untranslatable("%v", err)
		}
		writeError(w, APIMessages, e)
		return
	}
	c.API = APIMessages
	n, err := tc.CountTokens(r.Context(), c)
	if err != nil {
		writeError(w, APIMessages, asError(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": n})
}

// models answers GET /v1/models in the asking API's shape.
func (s *Server) models(w http.ResponseWriter, anthropic bool) {
	if anthropic {
		type model struct {
			Type        string `json:"type"`
			ID          string `json:"id"`
			DisplayName string `json:"display_name"`
			CreatedAt   string `json:"created_at"`
		}
		out := struct {
			Data    []model `json:"data"`
			HasMore bool    `json:"has_more"`
			FirstID string  `json:"first_id"`
			LastID  string  `json:"last_id"`
		}{}
		for _, m := range s.cfg.Models {
			out.Data = append(out.Data, model{Type: "model", ID: m, DisplayName: m, CreatedAt: "2025-01-01T00:00:00Z"})
		}
		out.FirstID, out.LastID = s.cfg.Models[0], s.cfg.Models[len(s.cfg.Models)-1]
		writeJSON(w, http.StatusOK, out)
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list"}
	for _, m := range s.cfg.Models {
		out.Data = append(out.Data, model{ID: m, Object: "model", Created: 0, OwnedBy: "forkline"})
	}
	writeJSON(w, http.StatusOK, out)
}

// asError is err as an answer: an *Error as it is, anything else a 500.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Status: 499, Type: "api_error", Message: "forkline gateway: the call was abandoned"}
	}
	return &Error{Status: http.StatusInternalServerError, Type: "api_error", Message: "forkline gateway: " + err.Error()}
}

// writeError answers e in api's error shape.
func writeError(w http.ResponseWriter, api string, e *Error) {
	if api == APIMessages {
		writeJSON(w, e.Status, anthropicError(e))
		return
	}
	writeJSON(w, e.Status, openAIError(e))
}

func anthropicError(e *Error) any {
	return map[string]any{"type": "error", "error": map[string]string{"type": e.Type, "message": e.Message}}
}

func openAIError(e *Error) any {
	typ := e.Type
	switch typ {
	case "api_error", "overloaded_error":
		typ = "server_error"
	case "not_found_error":
		typ = "invalid_request_error"
	}
	return map[string]any{"error": map[string]any{"message": e.Message, "type": typ, "code": e.Type, "param": nil}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data := marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// stream writes server-sent events; a non-streaming answer has no
// flusher and is written whole by json.
type stream struct {
	w   http.ResponseWriter
	f   http.Flusher
	mu  sync.Mutex
	seq int // Responses' sequence_number
}

func startStream(w http.ResponseWriter) *stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	st := &stream{w: w}
	st.f, _ = w.(http.Flusher)
	st.flush()
	return st
}

func (st *stream) flush() {
	if st.f != nil {
		st.f.Flush()
	}
}

// event writes one event: "event: NAME" when name is not empty, then the
// data line.
func (st *stream) event(name string, data []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if name != "" {
		_, _ = io.WriteString(st.w, "event: "+name+"\n")
	}
	_, _ = io.WriteString(st.w, "data: ")
	_, _ = st.w.Write(data)
	_, _ = io.WriteString(st.w, "\n\n")
	st.flush()
}

// comment writes an SSE comment line, which every client ignores.
func (st *stream) comment(text string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, _ = io.WriteString(st.w, ": "+text+"\n\n")
	st.flush()
}

// newID is prefix and 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// decodeJSON decodes body into v, naming the API in the error.
func decodeJSON(api string, body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
			Message: fmt.Sprintf("forkline gateway: the %s request is not valid JSON of its shape: %v", api, err)}
	}
	return nil
}
