package openai

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/forkline/forkline/policy"
)

// serverInfo is what the policy learned of its server once per run: what it
// is, and for a token-in-token-out run which endpoints render, generate and
// parse.
type serverInfo struct {
	kind        string // ServerVLLM, ServerSGLang, "llamacpp" or ServerOther
	model       string // the first model the server lists; "" when unknown
	templateSHA string // hex sha256 of the chat template the server reports; "" for none
	mode        policy.TokenMode
	// For TokensTITO:
	render   string // renderTokenize or renderChat
	generate string // generateCompletions, generateInference or generateSGLang
	derender bool   // the tool parser is the server's (ToolParserServer)
	// maxModelLen is the context length the server reports (vLLM's GET
	// /v1/models and POST /tokenize say it), 0 when it reports none: a
	// generation asks for at most what the prompt leaves of it.
	maxModelLen int
}

// How a token-in-token-out turn is rendered and generated.
const (
	renderTokenize      = "/tokenize"                     // vLLM: POST /tokenize with messages
	renderChat          = "/v1/chat/completions/render"   // vLLM --enable-scale-out
	generateCompletions = "/v1/completions"               // prompt as a list of token ids
	generateInference   = "/inference/v1/generate"        // vLLM --enable-scale-out
	generateSGLang      = "/generate"                     // SGLang: input_ids
	derenderChat        = "/v1/chat/completions/derender" // vLLM --enable-scale-out
)

// prober asks the server what it is and offers once per run, for every
// episode's policy: the first Decide asks, the others wait for its answer.
// An answer that depends on a server that could not be reached is not kept,
// so the next Decide asks again.
type prober struct {
	mu   sync.Mutex
	done bool
	info serverInfo
}

// get returns the server's info, asking it first if nobody has yet.
func (pr *prober) get(ctx context.Context, c *client) (serverInfo, error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.done {
		return pr.info, nil
	}
	info, err := probe(ctx, c)
	if err != nil {
		return serverInfo{}, err
	}
	pr.info, pr.done = info, true
	return info, nil
}

// probe asks the server, in order: what it is (GET /v1/models, unless
// Config.Server says), whether it reports its chat template (llama.cpp's
// GET /props), and, unless the run is chat only, which token-in-token-out
// endpoints it serves. A route is probed with a request it must refuse (an
// empty body): a 404 means it is not served — recent vLLM leaves the
// scale-out routes out unless started with --enable-scale-out, and answers
// 404 for them — while any other answer means it is. Only /tokenize is
// asked to render for real, since an SGLang /tokenize that only takes text
// would refuse a probe body too.
func probe(ctx context.Context, c *client) (serverInfo, error) {
	cfg := c.cfg
	info := serverInfo{kind: cfg.Server, mode: policy.TokensChat}
	kind, model, maxLen, err := serverKind(ctx, c)
	if err != nil {
		return serverInfo{}, err
	}
	info.model, info.maxModelLen = model, maxLen
	if info.kind == ServerAuto {
		info.kind = kind
	}
	sha, err := templateHash(ctx, c)
	if err != nil {
		return serverInfo{}, err
	}
	info.templateSHA = sha
	logf := func(format string, args ...any) {
		if cfg.Logf != nil {
			cfg.Logf(format, args...)
		}
	}
	// infof notes a choice that warns of nothing: token in, token out is
	// what tokens=auto is for.
	infof := func(format string, args ...any) {
		if cfg.Infof != nil {
			cfg.Infof(format, args...)
			return
		}
		logf(format, args...)
	}
	if cfg.Tokens == policy.TokensChat || !cfg.TokenIDs {
		return info, nil
	}
	if cfg.Observe.Images() {
		// Validate refuses tito with images; auto takes chat, where the
		// server sees the pixels.
		logf("openai: tokens=auto: chat mode, since observe=%s sends images and the token-in-token-out routes take token ids only", cfg.Observe)
		return info, nil
	}

	// Rendering: the scale-out render route when served, else /tokenize.
	renderServed, renderWhy, err := routeServed(ctx, c, c.render.api("/chat/completions/render"))
	if err != nil {
		return serverInfo{}, err
	}
	tokenizeOK, tokenizeWhy, tokenizeLen, err := tokenizeRenders(ctx, c)
	if err != nil {
		return serverInfo{}, err
	}
	if info.maxModelLen == 0 {
		info.maxModelLen = tokenizeLen
	}
	switch {
	case renderServed:
		info.render = renderChat
	case tokenizeOK:
		info.render = renderTokenize
	}
	inferenceServed, _, err := routeServed(ctx, c, c.urls.root(generateInference))
	if err != nil {
		return serverInfo{}, err
	}
	switch {
	case inferenceServed:
		info.generate = generateInference
	case info.kind == ServerSGLang:
		info.generate = generateSGLang
	default:
		info.generate = generateCompletions
	}
	if cfg.ToolParser == ToolParserServer {
		served, why, err := routeServed(ctx, c, c.urls.api("/chat/completions/derender"))
		if err != nil {
			return serverInfo{}, err
		}
		if !served {
			return serverInfo{}, &unavailableError{fmt.Errorf("openai: tool_parser=server needs the server's derender route, and %s (vLLM serves it with --enable-scale-out; or use tool_parser=hermes)", why)}
		}
		info.derender = true
	}

	if info.render == "" {
		why := fmt.Sprintf("%s; %s", tokenizeWhy, renderWhy)
		if cfg.Tokens == policy.TokensTITO {
			// The run cannot do what it was asked: it stops, and a resume
			// against a server that renders templates does the episodes.
			return serverInfo{}, &unavailableError{fmt.Errorf("openai: tokens=tito needs a server that renders the chat template for the policy (vLLM's POST /tokenize with messages, or its render route), and %s (set render_url to one that does, or use tokens=auto or chat)", why)}
		}
		logf("openai: tokens=auto: chat mode, since the server renders no chat template for clients (%s); token records may drift where the template re-renders history, and such episodes are flagged", why)
		return info, nil
	}
	if info.generate == generateCompletions && info.maxModelLen == 0 && cfg.MaxTokens == 0 {
		// Without max_tokens /v1/completions generates 16 tokens (null
		// too), so every reply would be cut; the rest of the context can
		// be asked for only when the server says how long it is.
		why := "the server reports no max_model_len (GET /v1/models, POST /tokenize) and POST /v1/completions generates 16 tokens without max_tokens"
		if cfg.Tokens == policy.TokensTITO {
			return serverInfo{}, fmt.Errorf("%w: openai: tokens=tito: %s; set -policy-opt max_tokens=N", ErrOption, why)
		}
		logf("openai: tokens=auto: chat mode, since %s (set max_tokens=N for token in, token out)", why)
		return info, nil
	}
	info.mode = policy.TokensTITO
	if cfg.Tokens == policy.TokensAuto {
		parsing := ", parsing with " + derenderChat
		if !info.derender {
			// The one choice auto makes that a model can defeat: say so.
			parsing = fmt.Sprintf(", parsing replies client-side (tool_parser=%s, reasoning_parser=%s; a model that writes its tool calls otherwise needs tool_parser=server or tokens=chat)", cfg.ToolParser, cfg.ReasoningParser)
		}
		infof("openai: tokens=auto: token in, token out, rendering new turns with %s and generating with %s%s",
			info.render, info.generate, parsing)
	}
	if !renderServed && info.render == renderTokenize {
		infof("openai: the scale-out routes are not served (%s): rendering with /tokenize", renderWhy)
	}
	return info, nil
}

// serverKind reads GET /v1/models: vLLM, SGLang and llama.cpp name
// themselves in owned_by. Anything else, an error status included, is
// ServerOther. model is the first model listed, maxLen its max_model_len
// (vLLM's model card), 0 when not reported.
func serverKind(ctx context.Context, c *client) (kind, model string, maxLen int, err error) {
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			OwnedBy     string `json:"owned_by"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if _, err = c.do(ctx, http.MethodGet, c.urls.api("/models"), nil, &models, nil); err != nil {
		if definite(err) {
			return ServerOther, "", 0, nil
		}
		return "", "", 0, err
	}
	if len(models.Data) == 0 {
		return ServerOther, "", 0, nil
	}
	model, maxLen = models.Data[0].ID, models.Data[0].MaxModelLen
	switch models.Data[0].OwnedBy {
	case "vllm":
		return ServerVLLM, model, maxLen, nil
	case "sglang":
		return ServerSGLang, model, maxLen, nil
	case "llamacpp":
		return "llamacpp", model, maxLen, nil
	}
	return ServerOther, model, maxLen, nil
}

// templateHash asks GET /props (llama.cpp's server reports the chat template
// it renders with there) and hashes the template; "" when the server
// reports none.
func templateHash(ctx context.Context, c *client) (string, error) {
	var props struct {
		ChatTemplate string `json:"chat_template"`
	}
	if _, err := c.do(ctx, http.MethodGet, c.urls.root("/props"), nil, &props, nil); err != nil {
		if definite(err) {
			return "", nil
		}
		return "", err
	}
	if props.ChatTemplate == "" {
		return "", nil
	}
	sum := sha256.Sum256([]byte(props.ChatTemplate))
	return hex.EncodeToString(sum[:]), nil
}

// routeServed POSTs an empty object to url: 404 or 405 means the route is not
// served; any other answer (a refusal of the empty body, usually) means it
// is. why says what was seen.
func routeServed(ctx context.Context, c *client, url string) (served bool, why string, err error) {
	_, err = c.do(ctx, http.MethodPost, url, map[string]any{}, nil, nil)
	var se *StatusError
	switch {
	case err == nil:
		return true, "", nil
	case errors.As(err, &se) && (se.Code == http.StatusNotFound || se.Code == http.StatusMethodNotAllowed):
		return false, fmt.Sprintf("POST %s answered %d", pathOf(url), se.Code), nil
	case definite(err):
		return true, "", nil // refused, so it is there
	}
	return false, "", err
}

// tokenizeRenders asks POST /tokenize to render a one-message conversation
// with the generation prompt: it does when it answers token ids (vLLM's
// chat form). why says what was seen otherwise; maxLen is the
// max_model_len it reports, 0 for none.
func tokenizeRenders(ctx context.Context, c *client) (ok bool, why string, maxLen int, err error) {
	var out tokenizeResponse
	url := c.render.root(renderTokenize)
	_, err = c.do(ctx, http.MethodPost, url, tokenizeRequest{
		Messages: []chatMessage{{Role: "user", Content: str("forkline probe")}}, AddGenerationPrompt: true,
	}, &out, nil)
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) {
			return false, fmt.Sprintf("POST %s answered %d", pathOf(url), se.Code), 0, nil
		}
		if definite(err) {
			return false, fmt.Sprintf("POST %s: %v", pathOf(url), err), 0, nil
		}
		return false, "", 0, err
	}
	if len(out.Tokens) == 0 {
		return false, fmt.Sprintf("POST %s answered no token ids for a chat", pathOf(url)), 0, nil
	}
	return true, "", out.MaxModelLen, nil
}

// definite reports whether err is an answer the server gave (an HTTP
// status, after any retries, or a body that was not what was asked for)
// rather than a failure to reach it, which is worth asking again.
func definite(err error) bool {
	var se *StatusError
	return errors.As(err, &se) || errors.Is(err, ErrBadResponse)
}
