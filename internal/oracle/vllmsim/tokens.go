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

// tokenize is vLLM's POST /tokenize (vllm/entrypoints/serve/tokenize:
// TokenizeChatRequest with messages, tools, add_generation_prompt (default
// true), continue_final_message, chat_template_kwargs, add_special_tokens
// (default false); TokenizeCompletionRequest with prompt, add_special_tokens
// (default true)). It answers {count, max_model_len, tokens, token_strs}.
func (s *Server) tokenize(ctx context.Context, r *Received) (any, error) {
	req, err := s.decodeRequest(r)
	if err != nil {
		return nil, err
	}
	var strs bool
	if err := field(req, "return_token_strs", &strs); err != nil {
		return nil, err
	}
	if req.has("messages") {
		p, err := s.readChatParams(req)
		if err != nil {
			return nil, err
		}
		if err := s.renderChat(ctx, p, r); err != nil {
			return nil, err
		}
	} else {
		pv, ok := req.get("prompt")
		prompt, isStr, err := str(pv)
		if !ok || err != nil || !isStr {
			return nil, badRequest("prompt: a string is required (or messages)")
		}
		add := true
		if err := field(req, "add_special_tokens", &add); err != nil {
			return nil, err
		}
		ids, err := oracle.TokenizeWith(ctx, s.cfg.Tokenizer, prompt, oracle.TokenizeOptions{AddSpecialTokens: add})
		if err != nil {
			return nil, err
		}
		r.Prompt, r.PromptIDs = prompt, ids
	}
	resp := map[string]any{"count": len(r.PromptIDs), "max_model_len": s.cfg.MaxModelLen, "tokens": r.PromptIDs, "token_strs": nil}
	if strs {
		ts, err := oracle.TokenStrings(ctx, s.cfg.Tokenizer, r.PromptIDs)
		if err != nil {
			return nil, err
		}
		resp["token_strs"] = ts
	}
	return resp, nil
}

// detokenize is vLLM's POST /detokenize: {tokens} to {prompt}, special
// tokens kept (a plain tokenizer.decode).
func (s *Server) detokenize(ctx context.Context, r *Received) (any, error) {
	req, err := s.decodeRequest(r)
	if err != nil {
		return nil, err
	}
	var ids []int32
	if err := field(req, "tokens", &ids); err != nil {
		return nil, err
	}
	text, err := oracle.Decode(ctx, s.cfg.Tokenizer, ids)
	if err != nil {
		return nil, err
	}
	return map[string]any{"prompt": text}, nil
}

// promptIDs reads a completion prompt: a list of token ids (used as is) or
// one string (tokenized, special tokens added unless add_special_tokens is
// false). Several prompts in one request are not simulated.
func (s *Server) promptIDs(ctx context.Context, req object, key string, addDefault bool) ([]int32, string, error) {
	v, ok := req.get(key)
	if !ok || isNull(v) {
		return nil, "", badRequest("Either prompt or prompt_embeds must be provided and non-empty.")
	}
	var ids []int32
	if err := json.Unmarshal(v, &ids); err == nil {
		if len(ids) == 0 {
			return nil, "", badRequest("Either prompt or prompt_embeds must be provided and non-empty.")
		}
		text, err := oracle.Decode(ctx, s.cfg.Tokenizer, ids)
		return ids, text, err
	}
	text, isStr, err := str(v)
	if err != nil || !isStr {
		return nil, "", badRequest("vllmsim: %s must be one string or one list of token ids", key)
	}
	add := addDefault
	if err := field(req, "add_special_tokens", &add); err != nil {
		return nil, "", err
	}
	ids, err = oracle.TokenizeWith(ctx, s.cfg.Tokenizer, text, oracle.TokenizeOptions{AddSpecialTokens: add})
	return ids, text, err
}

// completions is vLLM's POST /v1/completions
// (vllm/entrypoints/openai/completion/protocol.py: CompletionRequest,
// max_tokens default 16, and its normalize_null_max_tokens validator makes
// an explicit null the default too; logprobs an int; CompletionResponseChoice with text, logprobs
// {text_offset, token_logprobs, tokens, top_logprobs}, finish_reason,
// stop_reason, token_ids and prompt_token_ids when return_token_ids).
func (s *Server) completions(ctx context.Context, r *Received) (any, error) {
	req, err := s.decodeRequest(r)
	if err != nil {
		return nil, err
	}
	var sp struct {
		Logprobs          *int  `json:"logprobs"`
		MaxTokens         *int  `json:"max_tokens"`
		ReturnTokenIDs    *bool `json:"return_token_ids"`
		ReturnTokensAsIDs *bool `json:"return_tokens_as_token_ids"`
		SkipSpecialTokens *bool `json:"skip_special_tokens"`
		Echo              bool  `json:"echo"`
		Stream            *bool `json:"stream"`
		N                 *int  `json:"n"`
	}
	if err := json.Unmarshal(r.Body, &sp); err != nil {
		return nil, badRequest("%v", err)
	}
	if (sp.Stream != nil && *sp.Stream) || (sp.N != nil && *sp.N != 1) || sp.Echo {
		return nil, badRequest("vllmsim: streaming, n>1 and echo are not simulated")
	}
	ids, text, err := s.promptIDs(ctx, req, "prompt", true)
	if err != nil {
		return nil, err
	}
	r.Prompt, r.PromptIDs = text, ids
	// CompletionRequest's max_tokens defaults to 16 when absent, and its
	// normalize_null_max_tokens validator turns an explicit null into that
	// default as well (older releases answered 500): a client that wants
	// the rest of the context must send the number.
	asked := new(int)
	*asked = 16
	if sp.MaxTokens != nil {
		asked = sp.MaxTokens
	}
	budget, err := s.maxTokens(len(ids), asked, "max_tokens")
	if err != nil {
		return nil, err
	}
	g, err := s.generate(ctx, r, text, ids, budget)
	if err != nil {
		return nil, err
	}
	skip := sp.SkipSpecialTokens == nil || *sp.SkipSpecialTokens
	out, err := oracle.DecodeWith(ctx, s.cfg.Tokenizer, g.textIDs(), oracle.DecodeOptions{SkipSpecialTokens: skip})
	if err != nil {
		return nil, err
	}
	choice := object{
		{"index", mustJSON(0)}, {"text", mustJSON(out)}, {"logprobs", json.RawMessage("null")},
		{"finish_reason", mustJSON(g.finishReason())}, {"stop_reason", json.RawMessage("null")},
		{"token_ids", json.RawMessage("null")}, {"prompt_logprobs", json.RawMessage("null")},
		{"prompt_token_ids", json.RawMessage("null")},
	}
	if sp.Logprobs != nil {
		lp, err := s.completionLogprobs(ctx, g.ids, *sp.Logprobs, sp.ReturnTokensAsIDs != nil && *sp.ReturnTokensAsIDs)
		if err != nil {
			return nil, err
		}
		choice = choice.set("logprobs", mustJSON(lp))
	}
	if sp.ReturnTokenIDs != nil && *sp.ReturnTokenIDs && !r.Reply.OmitTokenIDs {
		choice = choice.set("token_ids", mustJSON(g.ids)).set("prompt_token_ids", mustJSON(ids))
	}
	return object{
		{"id", mustJSON(s.nextID("cmpl"))}, {"object", mustJSON("text_completion")},
		{"created", mustJSON(time.Now().Unix())}, {"model", mustJSON(s.cfg.Model)},
		{"choices", mustJSON([]json.RawMessage{choice.raw()})},
		{"usage", mustJSON(map[string]any{"prompt_tokens": len(ids), "completion_tokens": len(g.ids), "total_tokens": len(ids) + len(g.ids), "prompt_tokens_details": nil})},
		{"kv_transfer_params", json.RawMessage("null")},
	}, nil
}

// completionLogprobs is the legacy completions logprobs object.
func (s *Server) completionLogprobs(ctx context.Context, ids []int32, top int, asTokenIDs bool) (map[string]any, error) {
	texts, err := oracle.DecodeTokens(ctx, s.cfg.Tokenizer, ids)
	if err != nil {
		return nil, err
	}
	tokens := make([]string, len(ids))
	lps := make([]float64, len(ids))
	offsets := make([]int, len(ids))
	tops := make([]map[string]float64, len(ids))
	off := 0
	for i, id := range ids {
		tokens[i] = texts[i]
		if asTokenIDs {
			tokens[i] = fmt.Sprintf("token_id:%d", id)
		}
		lps[i] = fabricatedLogprob(i, id)
		offsets[i] = off
		off += len(texts[i])
		if top > 0 {
			tops[i] = map[string]float64{tokens[i]: lps[i]}
		}
	}
	var topOut any = tops
	if top <= 0 {
		topOut = make([]any, len(ids))
	}
	return map[string]any{"text_offset": offsets, "token_logprobs": lps, "tokens": tokens, "top_logprobs": topOut}, nil
}

// sglangGenerate is SGLang's native POST /generate
// (python/sglang/srt/managers/io_struct.py GenerateReqInput: text or
// input_ids, sampling_params{max_new_tokens (default 128),
// skip_special_tokens}, return_logprob, top_logprobs_num,
// return_text_in_logprobs). It answers {text, output_ids, meta_info{id,
// finish_reason{type: "stop", matched: <stop id>} or {type: "length",
// length: N}, prompt_tokens, completion_tokens, cached_tokens,
// output_token_logprobs [[logprob, id, text or null], ...]}}; output_ids and
// the logprobs hold the stop token, the text does not.
func (s *Server) sglangGenerate(ctx context.Context, r *Received) (any, error) {
	req, err := parseObject(r.Body)
	if err != nil {
		return nil, badRequest("the request body is not a JSON object: %v", err)
	}
	var sp struct {
		SamplingParams struct {
			MaxNewTokens      *int  `json:"max_new_tokens"`
			SkipSpecialTokens *bool `json:"skip_special_tokens"`
		} `json:"sampling_params"`
		ReturnLogprob        bool `json:"return_logprob"`
		ReturnTextInLogprobs bool `json:"return_text_in_logprobs"`
		Stream               bool `json:"stream"`
	}
	if err := json.Unmarshal(r.Body, &sp); err != nil {
		return nil, badRequest("%v", err)
	}
	if sp.Stream {
		return nil, badRequest("vllmsim: streaming is not simulated")
	}
	key := "input_ids"
	if !req.has("input_ids") {
		key = "text"
	}
	ids, text, err := s.promptIDs(ctx, req, key, false)
	if err != nil {
		return nil, err
	}
	r.Prompt, r.PromptIDs = text, ids
	// max_new_tokens defaults to 128 when absent; null leaves the rest of
	// the context.
	budget := 128
	if sp.SamplingParams.MaxNewTokens != nil {
		budget = *sp.SamplingParams.MaxNewTokens
	} else if spv, ok := req.get("sampling_params"); ok {
		if sampling, err := parseObject(spv); err == nil {
			if _, present := sampling.get("max_new_tokens"); present {
				budget = s.cfg.MaxModelLen - len(ids)
			}
		}
	}
	if len(ids)+budget > s.cfg.MaxModelLen {
		return nil, &httpError{status: http.StatusBadRequest, body: map[string]any{
			"error": map[string]any{"message": fmt.Sprintf("Requested token count exceeds the model's maximum context length of %d tokens. You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion.",
				s.cfg.MaxModelLen, len(ids)+budget, len(ids), budget), "code": 400}}}
	}
	g, err := s.generate(ctx, r, text, ids, budget)
	if err != nil {
		return nil, err
	}
	skip := sp.SamplingParams.SkipSpecialTokens == nil || *sp.SamplingParams.SkipSpecialTokens
	out, err := oracle.DecodeWith(ctx, s.cfg.Tokenizer, g.textIDs(), oracle.DecodeOptions{SkipSpecialTokens: skip})
	if err != nil {
		return nil, err
	}
	finish := map[string]any{"type": "length", "length": len(g.ids)}
	if g.stopped {
		finish = map[string]any{"type": "stop", "matched": s.stop}
	}
	meta := map[string]any{
		"id": s.nextID("sglang"), "finish_reason": finish, "prompt_tokens": len(ids),
		"completion_tokens": len(g.ids), "cached_tokens": 0,
	}
	if sp.ReturnLogprob {
		var texts []string
		if sp.ReturnTextInLogprobs {
			if texts, err = oracle.DecodeTokens(ctx, s.cfg.Tokenizer, g.ids); err != nil {
				return nil, err
			}
		}
		lps := make([][]any, len(g.ids))
		for i, id := range g.ids {
			var t any
			if texts != nil {
				t = texts[i]
			}
			lps[i] = []any{fabricatedLogprob(i, id), id, t}
		}
		meta["output_token_logprobs"] = lps
		meta["input_token_logprobs"] = []any{}
	}
	if r.Reply.OmitTokenIDs {
		return map[string]any{"text": out, "meta_info": meta}, nil
	}
	return map[string]any{"text": out, "output_ids": g.ids, "meta_info": meta}, nil
}

// The scale-out routes (vllm/entrypoints/serve/render/api_router.py,
// vllm/entrypoints/serve/disagg/protocol.py): render answers the
// GenerateRequest that /inference/v1/generate takes (the prompt as
// token_ids plus the sampling parameters); generate answers a
// GenerateResponse (choices with token_ids and logprobs, no text); derender
// turns a GenerateResponse back into a chat completion with the server's
// parsers.

func (s *Server) renderSampling(sp sampling, budget int) map[string]any {
	skip := sp.SkipSpecialTokens == nil || *sp.SkipSpecialTokens
	var logprobs any
	if sp.Logprobs {
		logprobs = sp.TopLogprobs
	}
	return map[string]any{"max_tokens": budget, "logprobs": logprobs, "skip_special_tokens": skip, "n": 1,
		"stop_token_ids": []int32{}, "temperature": 1.0}
}

func (s *Server) chatRender(ctx context.Context, r *Received) (any, error) {
	req, err := s.decodeRequest(r)
	if err != nil {
		return nil, err
	}
	sp, err := readSampling(r)
	if err != nil {
		return nil, err
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
	return map[string]any{
		"request_id": s.nextID("render"), "token_ids": r.PromptIDs, "features": nil,
		"sampling_params": s.renderSampling(sp, budget), "model": s.cfg.Model, "stream": false,
		"stream_options": nil, "cache_salt": nil, "priority": 0, "kv_transfer_params": nil,
	}, nil
}

func (s *Server) completionsRender(ctx context.Context, r *Received) (any, error) {
	req, err := s.decodeRequest(r)
	if err != nil {
		return nil, err
	}
	ids, text, err := s.promptIDs(ctx, req, "prompt", true)
	if err != nil {
		return nil, err
	}
	r.Prompt, r.PromptIDs = text, ids
	var sp sampling
	_ = json.Unmarshal(r.Body, &sp)
	asked := 16
	if sp.MaxTokens != nil {
		asked = *sp.MaxTokens
	}
	budget, err := s.maxTokens(len(ids), &asked, "max_tokens")
	if err != nil {
		return nil, err
	}
	sp.Logprobs = false
	return []any{map[string]any{
		"request_id": s.nextID("render"), "token_ids": ids, "features": nil,
		"sampling_params": s.renderSampling(sp, budget), "model": s.cfg.Model, "stream": false,
		"stream_options": nil, "cache_salt": nil, "priority": 0, "kv_transfer_params": nil,
	}}, nil
}

func (s *Server) tokensGenerate(ctx context.Context, r *Received) (any, error) {
	req, err := s.decodeRequest(r)
	if err != nil {
		return nil, err
	}
	var gr struct {
		RequestID      string  `json:"request_id"`
		TokenIDs       []int32 `json:"token_ids"`
		SamplingParams struct {
			MaxTokens *int `json:"max_tokens"`
			Logprobs  *int `json:"logprobs"`
		} `json:"sampling_params"`
		Stream bool `json:"stream"`
	}
	if err := json.Unmarshal(r.Body, &gr); err != nil {
		return nil, badRequest("%v", err)
	}
	if gr.Stream {
		return nil, badRequest("vllmsim: streaming is not simulated")
	}
	if len(gr.TokenIDs) == 0 || !req.has("sampling_params") {
		return nil, badRequest("token_ids and sampling_params are required")
	}
	text, err := oracle.Decode(ctx, s.cfg.Tokenizer, gr.TokenIDs)
	if err != nil {
		return nil, err
	}
	r.Prompt, r.PromptIDs = text, gr.TokenIDs
	budget, err := s.maxTokens(len(gr.TokenIDs), gr.SamplingParams.MaxTokens, "max_tokens")
	if err != nil {
		return nil, err
	}
	g, err := s.generate(ctx, r, text, gr.TokenIDs, budget)
	if err != nil {
		return nil, err
	}
	choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": g.finishReason(), "token_ids": g.ids}
	if r.Reply.OmitTokenIDs {
		choice["token_ids"] = nil
	}
	if gr.SamplingParams.Logprobs != nil {
		lp, err := s.chatLogprobs(ctx, g.ids, *gr.SamplingParams.Logprobs, false)
		if err != nil {
			return nil, err
		}
		choice["logprobs"] = lp
	}
	id := gr.RequestID
	if id == "" {
		id = s.nextID("generate")
	}
	return map[string]any{"request_id": id, "choices": []any{choice}, "prompt_logprobs": nil, "kv_transfer_params": nil}, nil
}

// chatDerender is POST /v1/chat/completions/derender: {model,
// generate_response, prompt_tokens, chat_request} to a chat completion, the
// text parsed by the server's parsers with the original request's tools.
func (s *Server) chatDerender(ctx context.Context, r *Received) (any, error) {
	req, err := parseObject(r.Body)
	if err != nil {
		return nil, badRequest("the request body is not a JSON object: %v", err)
	}
	if !req.has("model") {
		return nil, badRequest("model: field required")
	}
	if err := s.checkModel(req); err != nil {
		return nil, err
	}
	var dr struct {
		GenerateResponse struct {
			RequestID string `json:"request_id"`
			Choices   []struct {
				FinishReason string  `json:"finish_reason"`
				TokenIDs     []int32 `json:"token_ids"`
			} `json:"choices"`
		} `json:"generate_response"`
		PromptTokens int `json:"prompt_tokens"`
	}
	if err := json.Unmarshal(r.Body, &dr); err != nil {
		return nil, badRequest("%v", err)
	}
	if len(dr.GenerateResponse.Choices) != 1 {
		return nil, badRequest("vllmsim: generate_response must have one choice")
	}
	ch := dr.GenerateResponse.Choices[0]
	chatReq := object{}
	if cr, ok := req.get("chat_request"); ok && !isNull(cr) {
		if chatReq, err = parseObject(cr); err != nil {
			return nil, badRequest("chat_request: %v", err)
		}
	}
	p, err := s.chatKwargsOnly(chatReq)
	if err != nil {
		return nil, err
	}
	g := generation{ids: ch.TokenIDs, stopped: ch.FinishReason == "stop" && len(ch.TokenIDs) > 0 && ch.TokenIDs[len(ch.TokenIDs)-1] == s.stop}
	var sp sampling
	if cr, ok := req.get("chat_request"); ok && !isNull(cr) {
		_ = json.Unmarshal(cr, &sp)
	}
	id := dr.GenerateResponse.RequestID
	if id == "" {
		id = s.nextID("chatcmpl")
	}
	prompt := make([]int32, dr.PromptTokens)
	resp, err := s.chatResponse(ctx, chatReq, sp, p, prompt, g, id)
	if err != nil {
		return nil, err
	}
	// A derendered response has no prompt ids to report.
	return resp.(object).set("prompt_token_ids", json.RawMessage("null")), nil
}

// chatKwargsOnly reads the template kwargs of a chat request (for the
// reasoning parser's enable_thinking) without rendering it.
func (s *Server) chatKwargsOnly(req object) (map[string]any, error) {
	kw := map[string]any{}
	for k, v := range s.cfg.DefaultChatTemplateKwargs {
		kw[k] = v
	}
	var reqKwargs map[string]any
	if err := field(req, "chat_template_kwargs", &reqKwargs); err != nil {
		return nil, err
	}
	for k, v := range reqKwargs {
		kw[k] = v
	}
	if strings.TrimSpace(string(mustGet(req, "reasoning_effort"))) == `"none"` {
		if _, set := reqKwargs["enable_thinking"]; !set {
			kw["enable_thinking"] = false
		}
	}
	return kw, nil
}
