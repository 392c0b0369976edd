package openai

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forkline/forkline/runtime"
)

// Token in, token out.
//
// The policy keeps the episode's token ids itself: the first prompt as the
// server rendered it, then each reply's ids exactly as generated, stop token
// included. For every new observation it asks the server's own renderer for
// the new tokens only, and generates the next reply from the whole sequence
// sent as token ids. Nothing is ever re-rendered, so no chat template quirk
// (reasoning dropped from history, JSON re-dumped, a token split the
// tokenizer would not make) can change what the model already saw.
//
// The new turn. The tokens that follow a reply are what the template writes
// after an assistant turn: its end-of-turn text, the new messages, the
// generation prompt. They are read off two renders of a short conversation
// by the server's own renderer:
//
//	base = render([user ".", last reply])                          (no generation prompt)
//	full = render([user ".", last reply] + new messages)           (with the generation prompt)
//
// The reply ended with the token its generation stopped on (Qwen3's
// <|im_end|>). Counting that token's occurrences in base says which one in
// full closes the reply; the new turn is everything after it. Cutting
// there, rather than taking what follows base as a whole, keeps the
// template's text between that token and the next message (Qwen3's "\n"
// after <|im_end|>), which the model never generated: taking full minus
// base drops it, and a prompt built so is not what the template would have
// written. Counting, rather than requiring base to be a prefix of full,
// survives templates that write the same message differently when it is
// last (Qwen3 gives a last assistant turn an empty think block). The last
// reply stands in the short conversation, rather than a placeholder, for
// templates that read the calls a tool result answers; the leading user
// message for templates that require a conversation to start with one.
// Special tokens split tokenization, so the ids after a special token do
// not depend on what precedes it: the cut is exact for templates whose new
// turn depends on no more of the history than the last reply (Qwen's,
// Hermes', Llama's, Gemma's). TestNewTurnIsExact proves it against Qwen3's
// real template and tokenizer in every drift scenario.

// generation is one generated reply.
type generation struct {
	ids       []int32
	logprobs  []float32 // one per id, or nil
	text      string    // the reply's text without the stop token
	finish    string    // "stop" or "length"
	model     string
	latency   time.Duration
	endpoints []string
}

// titoTurn renders the new messages (the whole conversation on the first
// turn), generates from the episode's ids and parses the reply.
func (p *Policy) titoTurn(ctx context.Context, info serverInfo, fresh []chatMessage) (*turn, error) {
	var prompt []int32
	if p.ids == nil {
		ids, err := p.render(ctx, info, p.msgs, true)
		if err != nil {
			return nil, err
		}
		prompt = ids
	} else {
		if p.lastReply == nil || len(fresh) == 0 {
			return nil, errors.New("openai: tito: no new messages to render after the last reply")
		}
		delta, err := p.newTurn(ctx, info, fresh)
		if err != nil {
			return nil, err
		}
		prompt = append(slices.Clone(p.ids), delta...)
	}
	endpoints := []string{info.render}
	began := time.Now()
	gen, err := p.generate(ctx, info, prompt)
	if errors.Is(err, errNoTokenIDs) {
		return p.lostTurn(info, prompt, gen, began, append(endpoints, gen.endpoints...), err), nil
	}
	if err != nil {
		return nil, err
	}
	endpoints = append(endpoints, gen.endpoints...)

	t := &turn{}
	if info.derender {
		msg, err := p.derender(ctx, info, gen, len(prompt))
		if err != nil {
			return nil, err
		}
		endpoints = append(endpoints, derenderChat)
		t.content, t.calls = msg.Content, msg.ToolCalls
		t.reasoning = msg.Reasoning
		if t.reasoning == nil {
			t.reasoning = msg.ReasoningContent
		}
	} else {
		content := &gen.text
		if p.cfg.ReasoningParser == ReasoningParserQwen3 {
			t.reasoning, content = splitThink(gen.text)
		}
		t.content = content
		if p.cfg.ToolMode == ToolsNative && content != nil {
			if calls, before := parseHermes(*content); calls != nil {
				t.calls, t.content = calls, before
			}
		}
	}
	mask := make([]int8, len(gen.ids))
	for i := range mask {
		mask[i] = 1
	}
	model := gen.model
	if model == "" {
		model = p.cfg.Model
	}
	t.ev = &runtime.ModelEvent{
		Model: model, PromptIDs: prompt, ResponseIDs: gen.ids, ResponseMask: mask, Logprobs: gen.logprobs,
		FinishReason: gen.finish, Latency: time.Since(began),
		Usage:      runtime.Usage{PromptTokens: len(prompt), CompletionTokens: len(gen.ids)},
		Provenance: runtime.Provenance{Path: runtime.TokenPathTITO, Endpoints: endpoints, TemplateSHA256: info.templateSHA},
	}
	if t.content != nil {
		t.ev.RawText = *t.content
	}
	if t.reasoning != nil {
		t.ev.Reasoning = *t.reasoning
	}
	if gen.finish == "length" {
		t.truncated = "openai: the answer hit the token limit (max_tokens) and is not executed"
	}
	p.ids = append(slices.Clip(slices.Clone(prompt)), gen.ids...)
	p.turnEnd = gen.ids[len(gen.ids)-1]
	return t, nil
}

// lostTurn is a turn the server answered without token ids that could not
// be read back either (no return_token_ids, no token-named logprobs): the
// policy cannot continue the episode's ids, so the episode ends
// policy_error, and the turn is recorded with its prompt and no response
// ids, so that its token record is cut there (missing_ids) and flagged, as
// chat mode flags the same fault, rather than kept whole up to the turn
// before as if nothing had been lost.
func (p *Policy) lostTurn(info serverInfo, prompt []int32, gen generation, began time.Time, endpoints []string, err error) *turn {
	model := cmp.Or(gen.model, p.cfg.Model)
	ev := &runtime.ModelEvent{
		Model: model, PromptIDs: prompt, FinishReason: gen.finish, Latency: time.Since(began), RawText: gen.text,
		Usage:      runtime.Usage{PromptTokens: len(prompt)},
		Provenance: runtime.Provenance{Path: runtime.TokenPathTITO, Endpoints: endpoints, TemplateSHA256: info.templateSHA},
	}
	return &turn{ev: ev, lost: fmt.Sprintf("openai: tito: %v; the episode's token ids cannot go on without them (the record is cut here, missing_ids)", err)}
}

// newTurn is the ids the template writes after the last reply for fresh
// (see the comment at the top of this file).
func (p *Policy) newTurn(ctx context.Context, info serverInfo, fresh []chatMessage) ([]int32, error) {
	short := []chatMessage{{Role: "user", Content: str(".")}, *p.lastReply}
	base, err := p.render(ctx, info, short, false)
	if err != nil {
		return nil, err
	}
	full, err := p.render(ctx, info, append(short, fresh...), true)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, id := range base {
		if id == p.turnEnd {
			n++
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("openai: tito: the reply ended with token %d, which the chat template does not write after an assistant turn, so no prompt can continue it as the template would", p.turnEnd)
	}
	for i, id := range full {
		if id != p.turnEnd {
			continue
		}
		if n--; n == 0 {
			if i+1 == len(full) {
				break
			}
			return full[i+1:], nil
		}
	}
	return nil, fmt.Errorf("openai: tito: the template's render of the new turn does not continue the reply (token %d); %d ids rendered", p.turnEnd, len(full))
}

// render asks the server's renderer for the ids of msgs under the run's
// tools and chat template kwargs.
func (p *Policy) render(ctx context.Context, info serverInfo, msgs []chatMessage, addGenerationPrompt bool) ([]int32, error) {
	c := p.client
	if info.render == renderChat {
		var out renderResponse
		_, err := c.do(ctx, http.MethodPost, c.render.api("/chat/completions/render"), renderRequest{
			Model: p.cfg.Model, Messages: msgs, Tools: p.offeredTools(), AddGenerationPrompt: addGenerationPrompt,
			ChatTemplateKwargs: p.cfg.ChatTemplateKwargs,
		}, &out, func() error { return nonEmptyIDs(out.TokenIDs) })
		return out.TokenIDs, err
	}
	var out tokenizeResponse
	_, err := c.do(ctx, http.MethodPost, c.render.root(renderTokenize), tokenizeRequest{
		Model: p.cfg.Model, Messages: msgs, Tools: p.offeredTools(), AddGenerationPrompt: addGenerationPrompt,
		ChatTemplateKwargs: p.cfg.ChatTemplateKwargs,
	}, &out, func() error { return nonEmptyIDs(out.Tokens) })
	return out.Tokens, err
}

func nonEmptyIDs(ids []int32) error {
	if len(ids) == 0 {
		return errors.New("no token ids")
	}
	return nil
}

// generate asks for the next reply with prompt as token ids.
func (p *Policy) generate(ctx context.Context, info serverInfo, prompt []int32) (generation, error) {
	switch info.generate {
	case generateInference:
		return p.generateInference(ctx, info, prompt)
	case generateSGLang:
		return p.generateSGLang(ctx, info, prompt)
	}
	return p.generateCompletions(ctx, info, prompt)
}

// maxTokens is the most tokens a generation from a prompt of promptLen ids
// may add: the user's cap (max_tokens), bounded by what the prompt leaves
// of the server's context when the server says how long it is; without a
// cap, all that is left. nil when neither is known, for the routes whose
// servers then give the rest of the context themselves (vLLM's
// /inference/v1/generate, SGLang's /generate); the probe refuses
// /v1/completions that way, where it would be 16.
func (p *Policy) maxTokens(info serverInfo, promptLen int) (*int, error) {
	n := p.cfg.MaxTokens
	if info.maxModelLen > 0 {
		left := info.maxModelLen - promptLen
		if left < 1 {
			return nil, fmt.Errorf("openai: tito: the episode's %d tokens fill the model's context (max_model_len %d)", promptLen, info.maxModelLen)
		}
		if n == 0 || n > left {
			n = left
		}
	}
	if n == 0 {
		return nil, nil
	}
	return &n, nil
}

// generateCompletions is POST /v1/completions with the prompt as ids. The
// server must have generated from exactly those ids (it echoes them as
// prompt_token_ids): one that added a token of its own (a BOS) would make
// the record a lie.
func (p *Policy) generateCompletions(ctx context.Context, info serverInfo, prompt []int32) (generation, error) {
	budget, err := p.maxTokens(info, len(prompt))
	if err != nil {
		return generation{}, err
	}
	req := completionsRequest{
		Model: p.cfg.Model, Prompt: prompt, MaxTokens: budget, Temperature: p.cfg.Temperature,
		TopP: p.cfg.TopP, Seed: p.cfg.Seed, ReturnTokenIDs: true,
	}
	if p.cfg.Logprobs {
		zero := 0
		req.Logprobs = &zero
		req.ReturnTokensAsTokenIDs = info.kind != ServerSGLang
	}
	var resp completionsResponse
	url := p.client.urls.api("/completions")
	ans, err := p.client.do(ctx, http.MethodPost, url, req, &resp, func() error {
		if len(resp.Choices) == 0 {
			return errors.New("no choices")
		}
		return nil
	})
	if err != nil {
		return generation{}, err
	}
	ch := resp.Choices[0]
	if ch.PromptTokenIDs != nil && !slices.Equal(ch.PromptTokenIDs, prompt) {
		return generation{}, fmt.Errorf("openai: tito: POST %s generated from %d prompt ids that are not the %d sent", pathOf(url), len(ch.PromptTokenIDs), len(prompt))
	}
	g := generation{ids: ch.TokenIDs, text: ch.Text, finish: ch.FinishReason, model: resp.Model,
		latency: ans.latency, endpoints: []string{pathOf(url)}}
	if lp := ch.Logprobs; lp != nil {
		if g.ids == nil {
			// A server without return_token_ids still names each
			// sampled token "token_id:N" in its logprobs.
			g.ids = idsFromTokenNames(lp.Tokens)
		}
		if len(lp.TokenLogprobs) == len(g.ids) {
			g.logprobs = make([]float32, len(g.ids))
			for i, v := range lp.TokenLogprobs {
				if v == nil {
					g.logprobs = nil
					break
				}
				g.logprobs[i] = float32(*v)
			}
		}
	}
	return g, checkGeneration(&g, url)
}

// idsFromTokenNames reads "token_id:N" token names; nil when any is not one.
func idsFromTokenNames(names []string) []int32 {
	if len(names) == 0 {
		return nil
	}
	out := make([]int32, len(names))
	for i, n := range names {
		v, ok := strings.CutPrefix(n, "token_id:")
		id, err := strconv.ParseInt(v, 10, 32)
		if !ok || err != nil {
			return nil
		}
		out[i] = int32(id)
	}
	return out
}

// errNoTokenIDs is a generation answered without token ids (and none could
// be read off its logprobs).
var errNoTokenIDs = errors.New("the reply carries no token ids")

// checkGeneration refuses a reply without ids (errNoTokenIDs) or with a
// finish this policy cannot continue from.
func checkGeneration(g *generation, url string) error {
	if len(g.ids) == 0 {
		return fmt.Errorf("%w: POST %s: %w", ErrBadResponse, pathOf(url), errNoTokenIDs)
	}
	if g.finish != "stop" && g.finish != "length" {
		return fmt.Errorf("%w: POST %s: finish_reason %q", ErrBadResponse, pathOf(url), g.finish)
	}
	return nil
}

// generateInference is vLLM's POST /inference/v1/generate. It answers ids
// only: unless the server parses (derender), the text comes from
// /detokenize.
func (p *Policy) generateInference(ctx context.Context, info serverInfo, prompt []int32) (generation, error) {
	budget, err := p.maxTokens(info, len(prompt))
	if err != nil {
		return generation{}, err
	}
	req := inferenceRequest{Model: p.cfg.Model, TokenIDs: prompt, SamplingParams: samplingParams{
		MaxTokens: budget, Temperature: p.cfg.Temperature, TopP: p.cfg.TopP, Seed: p.cfg.Seed,
	}}
	if p.cfg.Logprobs {
		zero := 0
		req.SamplingParams.Logprobs = &zero
	}
	var resp inferenceResponse
	url := p.client.urls.root(generateInference)
	ans, err := p.client.do(ctx, http.MethodPost, url, req, &resp, func() error {
		if len(resp.Choices) == 0 {
			return errors.New("no choices")
		}
		return nil
	})
	if err != nil {
		return generation{}, err
	}
	ch := resp.Choices[0]
	g := generation{ids: ch.TokenIDs, finish: ch.FinishReason, latency: ans.latency, endpoints: []string{pathOf(url)}}
	if ch.Logprobs != nil && len(ch.Logprobs.Content) == len(g.ids) {
		g.logprobs = make([]float32, len(g.ids))
		for i, c := range ch.Logprobs.Content {
			g.logprobs[i] = float32(c.Logprob)
		}
	}
	if err := checkGeneration(&g, url); err != nil {
		return g, err
	}
	if info.derender {
		return g, nil
	}
	textIDs := g.ids
	if g.finish == "stop" {
		textIDs = g.ids[:len(g.ids)-1] // the stop token is never part of the text
	}
	var out detokenizeResponse
	durl := p.client.urls.root("/detokenize")
	if len(textIDs) > 0 {
		if _, err := p.client.do(ctx, http.MethodPost, durl, detokenizeRequest{Model: p.cfg.Model, Tokens: textIDs}, &out, nil); err != nil {
			return g, err
		}
	}
	g.text = out.Prompt
	g.endpoints = append(g.endpoints, pathOf(durl))
	return g, nil
}

// generateSGLang is SGLang's native POST /generate with input_ids.
func (p *Policy) generateSGLang(ctx context.Context, info serverInfo, prompt []int32) (generation, error) {
	budget, err := p.maxTokens(info, len(prompt))
	if err != nil {
		return generation{}, err
	}
	req := sglangRequest{InputIDs: prompt, ReturnLogprob: p.cfg.Logprobs, SamplingParams: sglangSampling{
		MaxNewTokens: budget, Temperature: p.cfg.Temperature, TopP: p.cfg.TopP, SamplingSeed: p.cfg.Seed,
	}}
	var resp sglangResponse
	url := p.client.urls.root(generateSGLang)
	ans, err := p.client.do(ctx, http.MethodPost, url, req, &resp, nil)
	if err != nil {
		return generation{}, err
	}
	g := generation{ids: resp.OutputIDs, text: resp.Text, finish: resp.MetaInfo.FinishReason.Type,
		latency: ans.latency, endpoints: []string{pathOf(url)}}
	if lps := resp.MetaInfo.OutputTokenLogprobs; len(lps) == len(g.ids) && len(lps) > 0 {
		g.logprobs = make([]float32, len(lps))
		for i, e := range lps {
			var v float64
			if len(e) == 0 || json.Unmarshal(e[0], &v) != nil {
				g.logprobs = nil
				break
			}
			g.logprobs[i] = float32(v)
		}
	}
	return g, checkGeneration(&g, url)
}

// derender has the server parse a generation with its own reasoning and
// tool parsers (vLLM's /v1/chat/completions/derender).
func (p *Policy) derender(ctx context.Context, info serverInfo, g generation, promptLen int) (*chatChoiceMessage, error) {
	genResp, _ := marshalNoEscape(map[string]any{
		"choices": []any{map[string]any{"index": 0, "token_ids": g.ids, "finish_reason": g.finish}},
	})
	// The route requires a model; without one configured, the one the
	// server serves.
	model := p.cfg.Model
	if model == "" {
		model = info.model
	}
	req := derenderRequest{Model: model, GenerateResponse: genResp, PromptTokens: promptLen,
		ChatRequest: derenderChatRequest{Model: model, Messages: p.msgs, Tools: p.offeredTools(), ChatTemplateKwargs: p.cfg.ChatTemplateKwargs}}
	var resp chatResponse
	url := p.client.urls.api("/chat/completions/derender")
	if _, err := p.client.do(ctx, http.MethodPost, url, req, &resp, func() error {
		if len(resp.Choices) == 0 {
			return errors.New("no choices")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return &resp.Choices[0].Message, nil
}
