package vllmsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/forkline/forkline/internal/oracle"
)

// chatRequestFields are the fields vLLM's ChatCompletionRequest declares
// (vllm/entrypoints/openai/chat_completion/protocol.py); others are logged
// as ignored.
var chatRequestFields = setOf("messages", "model", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
	"max_tokens", "max_completion_tokens", "n", "presence_penalty", "response_format", "seed", "stop", "stream",
	"stream_options", "temperature", "top_p", "tools", "tool_choice", "reasoning_effort", "thinking_token_budget",
	"include_reasoning", "parallel_tool_calls", "user", "use_beam_search", "top_k", "min_p", "repetition_penalty",
	"watermarking", "length_penalty", "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "min_tokens",
	"skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens", "truncation_side",
	"prompt_logprobs", "logprob_token_ids", "allowed_token_ids", "bad_words", "echo", "add_generation_prompt",
	"continue_final_message", "add_special_tokens", "documents", "chat_template", "chat_template_kwargs",
	"media_io_kwargs", "mm_processor_kwargs", "structured_outputs", "priority", "request_id", "session_id",
	"return_tokens_as_token_ids", "return_token_ids", "routed_experts_prompt_start", "return_token_offsets",
	"return_prompt_text", "return_mm_kwargs", "cache_salt", "kv_transfer_params", "ec_transfer_params",
	"vllm_xargs", "repetition_detection", "stream_interval")

func setOf(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// chatParams are the parts of a chat request that shape the prompt.
type chatParams struct {
	messages             json.RawMessage
	tools                json.RawMessage
	documents            json.RawMessage
	addGenerationPrompt  bool
	continueFinalMessage bool
	addSpecialTokens     bool
	kwargs               map[string]any
}

// readChatParams reads what the template gets from a chat (or tokenize)
// request. The template variables are merged as vLLM merges them
// (ChatCompletionRequest.build_chat_params, vllm/renderers merge_kwargs):
// the server's default kwargs, then the request's chat_template_kwargs, then
// the request's own fields (add_generation_prompt, continue_final_message,
// documents); reasoning_effort sets enable_thinking when the request's
// kwargs do not.
func (s *Server) readChatParams(req object) (chatParams, error) {
	p := chatParams{addGenerationPrompt: true, kwargs: map[string]any{}}
	for k, v := range s.cfg.DefaultChatTemplateKwargs {
		p.kwargs[k] = v
	}
	var reqKwargs map[string]any
	if err := field(req, "chat_template_kwargs", &reqKwargs); err != nil {
		return p, err
	}
	for k, v := range reqKwargs {
		p.kwargs[k] = v
	}
	if err := field(req, "add_generation_prompt", &p.addGenerationPrompt); err != nil {
		return p, err
	}
	if err := field(req, "continue_final_message", &p.continueFinalMessage); err != nil {
		return p, err
	}
	if p.continueFinalMessage && p.addGenerationPrompt {
		return p, badRequest("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	}
	if err := field(req, "add_special_tokens", &p.addSpecialTokens); err != nil {
		return p, err
	}
	var effort *string
	if err := field(req, "reasoning_effort", &effort); err != nil {
		return p, err
	}
	if _, set := reqKwargs["enable_thinking"]; effort != nil && !set {
		p.kwargs["enable_thinking"] = *effort != "none"
	}
	if v, ok := req.get("documents"); ok && !isNull(v) {
		p.documents = v
	}
	delete(p.kwargs, "add_generation_prompt")
	delete(p.kwargs, "continue_final_message")
	delete(p.kwargs, "documents")
	delete(p.kwargs, "tools")
	delete(p.kwargs, "messages")

	rawMessages, _ := req.get("messages")
	msgs, err := templateMessages(rawMessages, s.cfg.ContentFormat)
	if err != nil {
		return p, badRequest("%v", err)
	}
	p.messages = mustJSON(msgs)
	rawTools, _ := req.get("tools")
	if p.tools, err = templateTools(rawTools); err != nil {
		return p, badRequest("%v", err)
	}
	return p, nil
}

// renderChat renders and tokenizes the prompt, recording both.
func (s *Server) renderChat(ctx context.Context, p chatParams, r *Received) error {
	r.Messages, r.Tools, r.TemplateKwargs = p.messages, p.tools, p.kwargs
	rr := oracle.RenderRequest{
		Messages: p.messages, AddGenerationPrompt: p.addGenerationPrompt,
		ContinueFinalMessage: p.continueFinalMessage, Kwargs: p.kwargs,
	}
	if p.tools != nil {
		rr.Tools = p.tools
	}
	if p.documents != nil {
		rr.Documents = p.documents
	}
	prompt, err := oracle.Render(ctx, s.cfg.Template, rr)
	if err != nil {
		if oracle.IsTemplateError(err) {
			// vLLM answers a template that raises with a 400.
			return badRequest("%v", err)
		}
		return err
	}
	if s.cfg.ImageTokens > 0 {
		prompt = strings.ReplaceAll(prompt, "<start_of_image>",
			"\n\n<start_of_image>"+strings.Repeat("<image_soft_token>", s.cfg.ImageTokens)+"<end_of_image>\n\n")
	}
	ids, err := oracle.TokenizeWith(ctx, s.cfg.Tokenizer, prompt, oracle.TokenizeOptions{AddSpecialTokens: p.addSpecialTokens})
	if err != nil {
		return err
	}
	r.Prompt, r.PromptIDs = prompt, ids
	return nil
}

// maxTokens resolves the completion budget and checks the context length as
// vLLM does (the renderer's TokenizeParams): no budget asked means what is
// left of the context; a prompt that leaves no room, or a budget that does
// not fit, is a 400.
func (s *Server) maxTokens(promptLen int, asked *int, param string) (int, error) {
	limit := s.cfg.MaxModelLen
	if promptLen >= limit {
		return 0, apiError(http.StatusBadRequest, "BadRequestError",
			fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", limit, promptLen), "")
	}
	if asked == nil {
		return limit - promptLen, nil
	}
	if *asked < 0 {
		return 0, badRequest("%s must be at least 0, got %d.", param, *asked)
	}
	if promptLen+*asked > limit {
		return 0, apiError(http.StatusBadRequest, "BadRequestError",
			fmt.Sprintf("'%s' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).",
				param, *asked, limit, promptLen, *asked, limit, promptLen), param)
	}
	return *asked, nil
}

// generation is one scripted generation.
type generation struct {
	ids     []int32 // generated ids; the stop token last when stopped
	stopped bool    // ended on the stop token (finish "stop"), else cut ("length")
	// omitIDs answers without token ids (Reply.OmitTokenIDs).
	omitIDs bool
}

func omitIDs(g generation) bool { return g.omitIDs }

// textIDs are the generated ids without the stop token: what is detokenized
// into the text (vLLM never shows the stop token in the text; it keeps it in
// token_ids and logprobs).
func (g generation) textIDs() []int32 {
	if g.stopped {
		return g.ids[:len(g.ids)-1]
	}
	return g.ids
}

func (g generation) finishReason() string {
	if g.stopped {
		return "stop"
	}
	return "length"
}

// generate asks the script for a reply, tokenizes it with the real
// tokenizer (non-canonically when asked), appends the stop token and cuts
// at maxTokens.
func (s *Server) generate(ctx context.Context, r *Received, prompt string, promptIDs []int32, maxTokens int) (generation, error) {
	s.mu.Lock()
	index := s.turns
	s.turns++
	s.mu.Unlock()
	reply, err := s.cfg.Respond(Turn{Index: index, Endpoint: r.Path, Prompt: prompt, PromptIDs: promptIDs, Body: r.Body})
	if err != nil {
		return generation{}, err
	}
	r.Reply = &reply
	ids, err := oracle.Tokenize(ctx, s.cfg.Tokenizer, reply.Text)
	if err != nil {
		return generation{}, err
	}
	if reply.NonCanonical {
		if ids, err = oracle.SplitNonCanonical(ctx, s.cfg.Tokenizer, ids); err != nil {
			return generation{}, err
		}
	}
	g := generation{ids: append(ids, s.stop), stopped: true, omitIDs: reply.OmitTokenIDs}
	if len(g.ids) > maxTokens {
		g.ids, g.stopped = g.ids[:maxTokens], false
	}
	r.GeneratedIDs = g.ids
	return g, nil
}

// fabricatedLogprob is the logprob reported for token id at position i: a
// fixed function, so a test can recompute it (Logprob).
func fabricatedLogprob(i int, id int32) float64 {
	return -float64((int(id)*7+i*13)%1000+1) / 1000
}

// Logprob is the logprob the server reports for the token id generated at
// position i of a reply.
func Logprob(i int, id int32) float64 { return fabricatedLogprob(i, id) }

type logprobEntry struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []topLogprob `json:"top_logprobs"`
}

type topLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// chatLogprobs is logprobs.content[] (vllm/entrypoints/openai/chat_completion
// serving, _create_chat_logprobs): one entry per generated id, the stop
// token included; top_logprobs lists top alternatives, the sampled token
// first (fabricated: the next ids in the vocabulary).
func (s *Server) chatLogprobs(ctx context.Context, ids []int32, top int, asTokenIDs bool) (map[string]any, error) {
	alts := make([]int32, 0, len(ids)*(1+max(top-1, 0)))
	for _, id := range ids {
		alts = append(alts, id)
		for k := 1; k < top; k++ {
			alts = append(alts, id+int32(k))
		}
	}
	texts, err := oracle.DecodeTokens(ctx, s.cfg.Tokenizer, alts)
	if err != nil {
		return nil, err
	}
	name := func(j int) string {
		if asTokenIDs {
			return fmt.Sprintf("token_id:%d", alts[j])
		}
		return texts[j]
	}
	content := make([]logprobEntry, len(ids))
	j := 0
	for i, id := range ids {
		lp := fabricatedLogprob(i, id)
		e := logprobEntry{Token: name(j), Logprob: lp, Bytes: utf8Bytes(texts[j]), TopLogprobs: []topLogprob{}}
		if top > 0 {
			e.TopLogprobs = append(e.TopLogprobs, topLogprob{Token: name(j), Logprob: lp, Bytes: utf8Bytes(texts[j])})
		}
		j++
		for k := 1; k < top; k++ {
			e.TopLogprobs = append(e.TopLogprobs, topLogprob{Token: name(j), Logprob: lp - float64(k), Bytes: utf8Bytes(texts[j])})
			j++
		}
		content[i] = e
	}
	return map[string]any{"content": content}, nil
}

func utf8Bytes(s string) []int {
	b := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = int(s[i])
	}
	return b
}

// parsedOutput is the message a chat response carries.
type parsedOutput struct {
	content     *string
	reasoning   *string
	toolCalls   []ToolCall
	toolsCalled bool
}

// parseOutput runs the configured parsers over the generated text the way
// vLLM's non-streaming chat serving does
// (vllm/entrypoints/openai/chat_completion/serving.py): the reasoning
// parser first, then, when the request has tools and tool_choice is auto
// (the default with tools), the tool parser over the content.
func (s *Server) parseOutput(ctx context.Context, text string, req object, kwargs map[string]any) (parsedOutput, error) {
	out := parsedOutput{content: &text}
	if s.cfg.ReasoningParser {
		thinking := true
		if v, ok := kwargs["enable_thinking"].(bool); ok {
			thinking = v
		}
		out.reasoning, out.content = splitReasoning(text, thinking)
		include := true
		if err := field(req, "include_reasoning", &include); err != nil {
			return out, err
		}
		if !include {
			out.reasoning = nil
		}
	}
	if s.cfg.ToolParser && req.has("tools") && toolChoiceAuto(req) {
		in := ""
		if out.content != nil {
			in = *out.content
		}
		calls, content, err := parseToolCallsHermes(ctx, in, func() string { return s.nextID("chatcmpl-tool") })
		if err != nil {
			return out, err
		}
		if calls != nil {
			out.toolCalls, out.toolsCalled, out.content = calls, true, content
		}
	}
	return out, nil
}

func toolChoiceAuto(req object) bool {
	v, ok := req.get("tool_choice")
	if !ok {
		return true // vLLM makes "auto" the default when tools are given
	}
	if isNull(v) {
		return true
	}
	choice, isStr, _ := str(v)
	return isStr && choice == "auto"
}

func (s *Server) message(out parsedOutput) object {
	msg := object{{"role", mustJSON("assistant")}, {"content", mustJSON(out.content)}}
	// ChatMessage's serializer drops an empty tool_calls list.
	if len(out.toolCalls) > 0 {
		msg = msg.set("tool_calls", mustJSON(out.toolCalls))
	}
	msg = msg.set(s.cfg.ReasoningField, mustJSON(out.reasoning))
	return msg
}

type sampling struct {
	Logprobs            bool  `json:"logprobs"`
	TopLogprobs         int   `json:"top_logprobs"`
	MaxTokens           *int  `json:"max_tokens"`
	MaxCompletionTokens *int  `json:"max_completion_tokens"`
	ReturnTokenIDs      *bool `json:"return_token_ids"`
	ReturnTokensAsIDs   *bool `json:"return_tokens_as_token_ids"`
	SkipSpecialTokens   *bool `json:"skip_special_tokens"`
	Stream              *bool `json:"stream"`
	N                   *int  `json:"n"`
}

func readSampling(r *Received) (sampling, error) {
	var sp sampling
	if err := json.Unmarshal(r.Body, &sp); err != nil {
		return sp, badRequest("%v", err)
	}
	if sp.Stream != nil && *sp.Stream {
		return sp, badRequest("vllmsim: streaming is not simulated")
	}
	if sp.N != nil && *sp.N != 1 {
		return sp, badRequest("vllmsim: only n=1 is simulated")
	}
	return sp, nil
}

func (s *Server) chatCompletions(ctx context.Context, r *Received) (any, error) {
	req, err := s.decodeRequest(r)
	if err != nil {
		return nil, err
	}
	r.Warnings = ignoredFields(req, chatRequestFields)
	sp, err := readSampling(r)
	if err != nil {
		return nil, err
	}
	if req.has("tools") && toolChoiceAuto(req) && !s.cfg.ToolParser {
		// vLLM refuses auto tool choice without a tool parser
		// (chat_completion/serving.py).
		return nil, badRequest(`"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`)
	}
	p, err := s.readChatParams(req)
	if err != nil {
		return nil, err
	}
	if err := s.renderChat(ctx, p, r); err != nil {
		return nil, err
	}
	asked, param := sp.MaxTokens, "max_tokens"
	if sp.MaxCompletionTokens != nil {
		asked, param = sp.MaxCompletionTokens, "max_completion_tokens"
	}
	budget, err := s.maxTokens(len(r.PromptIDs), asked, param)
	if err != nil {
		return nil, err
	}
	g, err := s.generate(ctx, r, r.Prompt, r.PromptIDs, budget)
	if err != nil {
		return nil, err
	}
	return s.chatResponse(ctx, req, sp, p.kwargs, r.PromptIDs, g, s.nextID("chatcmpl"))
}

// chatResponse builds vLLM's ChatCompletionResponse for a generation.
func (s *Server) chatResponse(ctx context.Context, req object, sp sampling, kwargs map[string]any, promptIDs []int32, g generation, id string) (any, error) {
	// The hermes parser turns skip_special_tokens off when tools are given
	// (adjust_request), so special tool tags survive detokenization.
	skip := sp.SkipSpecialTokens == nil || *sp.SkipSpecialTokens
	if s.cfg.ToolParser && req.has("tools") {
		skip = false
	}
	text, err := oracle.DecodeWith(ctx, s.cfg.Tokenizer, g.textIDs(), oracle.DecodeOptions{SkipSpecialTokens: skip})
	if err != nil {
		return nil, err
	}
	out, err := s.parseOutput(ctx, text, req, kwargs)
	if err != nil {
		return nil, err
	}
	finish := g.finishReason()
	// vLLM reports tool_calls whenever a call was parsed, even when the
	// output was cut at max_tokens.
	if out.toolsCalled {
		finish = "tool_calls"
	}
	choice := object{
		{"index", mustJSON(0)},
		{"message", s.message(out).raw()},
		{"logprobs", json.RawMessage("null")},
		{"finish_reason", mustJSON(finish)},
		{"stop_reason", json.RawMessage("null")},
	}
	if sp.Logprobs {
		lp, err := s.chatLogprobs(ctx, g.ids, sp.TopLogprobs, sp.ReturnTokensAsIDs != nil && *sp.ReturnTokensAsIDs)
		if err != nil {
			return nil, err
		}
		choice = choice.set("logprobs", mustJSON(lp))
	}
	returnIDs := sp.ReturnTokenIDs != nil && *sp.ReturnTokenIDs && !omitIDs(g)
	if returnIDs {
		choice = choice.set("token_ids", mustJSON(g.ids))
	} else {
		choice = choice.set("token_ids", json.RawMessage("null"))
	}
	resp := object{
		{"id", mustJSON(id)},
		{"object", mustJSON("chat.completion")},
		{"created", mustJSON(time.Now().Unix())},
		{"model", mustJSON(s.cfg.Model)},
		{"choices", mustJSON([]json.RawMessage{choice.raw()})},
		{"usage", mustJSON(map[string]any{
			"prompt_tokens": len(promptIDs), "completion_tokens": len(g.ids),
			"total_tokens": len(promptIDs) + len(g.ids), "prompt_tokens_details": nil,
		})},
		{"prompt_logprobs", json.RawMessage("null")},
		{"prompt_token_ids", json.RawMessage("null")},
		{"kv_transfer_params", json.RawMessage("null")},
	}
	if returnIDs {
		resp = resp.set("prompt_token_ids", mustJSON(promptIDs))
	}
	return resp, nil
}
