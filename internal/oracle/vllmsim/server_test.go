package vllmsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/forkline/forkline/internal/oracle"
)

const imEnd = 151645 // <|im_end|> in Qwen3's tokenizer.json

// TestChatPreprocessing checks what reaches the template against what vLLM
// does to a request (vLLM's chat_utils.py and
// protocol.py): content null becomes "", tool-call arguments are parsed
// into an object in the order sent, reasoning_content is read as
// reasoning, keys vLLM does not read are dropped, tools are re-ordered to
// pydantic's order with null for a missing description, and
// chat_template_kwargs merge over the server defaults. The rendered prompt
// must equal the oracle's own render of that conversation.
func TestChatPreprocessing(t *testing.T) {
	s := Start(t, Config{ToolParser: true, DefaultChatTemplateKwargs: map[string]any{"enable_thinking": false, "custom": "server"},
		Respond: Replies(Reply{Text: "ok"})})
	body := `{"model": "Qwen/Qwen3-8B", "max_tokens": 8,
	 "chat_template_kwargs": {"custom": "request"},
	 "return_prompt_token_ids": true,
	 "tools": [{"function": {"parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}, "name": "exec"}, "type": "function", "x-extra": 1}],
	 "messages": [
	  {"role": "user", "content": "go", "foo": "dropped"},
	  {"role": "assistant", "content": null, "reasoning_content": "think", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{\"z\": 1, \"a\": \"é\"}"}}]},
	  {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "line1"}, {"type": "text", "text": "line2"}]}
	 ]}`
	status, resp := postRaw(t, s, "/v1/chat/completions", []byte(body))
	if status != 200 {
		t.Fatalf("%d %v", status, resp)
	}
	rec, _ := s.Last("/v1/chat/completions")
	wantMessages := `[{"role":"user","content":"go"},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"exec","arguments":{"z":1,"a":"é"}}}],"reasoning":"think","reasoning_content":"think"},` +
		`{"role":"tool","content":"line1\nline2","tool_call_id":"c1"}]`
	if string(rec.Messages) != wantMessages {
		t.Errorf("messages reaching the template:\n got %s\nwant %s", rec.Messages, wantMessages)
	}
	wantTools := `[{"type":"function","function":{"name":"exec","description":null,"parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}}]`
	if string(rec.Tools) != wantTools {
		t.Errorf("tools reaching the template:\n got %s\nwant %s", rec.Tools, wantTools)
	}
	if rec.TemplateKwargs["custom"] != "request" || rec.TemplateKwargs["enable_thinking"] != false {
		t.Errorf("kwargs must be the server defaults overridden by the request: %v", rec.TemplateKwargs)
	}
	if !strings.Contains(rec.Prompt, `{"name": "exec", "arguments": {"z": 1, "a": "é"}}`) ||
		!strings.Contains(rec.Prompt, `"description": null`) {
		t.Errorf("the prompt does not write the parsed arguments and tools with tojson:\n%s", rec.Prompt)
	}
	want, err := oracle.Render(context.Background(), "qwen3", oracle.RenderRequest{
		Messages: json.RawMessage(wantMessages), Tools: json.RawMessage(wantTools), AddGenerationPrompt: true,
		Kwargs: map[string]any{"enable_thinking": false, "custom": "request"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Prompt != want {
		t.Errorf("the server's prompt differs from the oracle's render:\n got %q\nwant %q", rec.Prompt, want)
	}
	if len(rec.Warnings) != 1 || !strings.Contains(rec.Warnings[0], "'return_prompt_token_ids'") {
		t.Errorf("an SGLang-only field must be logged as ignored, as vLLM does: %v", rec.Warnings)
	}
}

// TestChatResponse checks the answer against vLLM's documented shape
// (vLLM's serving code and parsers): the think block in message.reasoning with the qwen3 parser
// (reasoning_content with the older field name), content before the first
// <tool_call> or null, arguments re-dumped Python-style, finish_reason
// tool_calls; token_ids end with <|im_end|>, which the text never shows;
// logprobs.content has one entry per token id, stop token included;
// prompt_token_ids are the real tokenizer's ids of the real template's
// render; usage counts them.
func TestChatResponse(t *testing.T) {
	reply := "<think>\nPlan: list.\n</think>\n\nLet me look.\n<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\":\"ls\",\"dir\":\"é\"}}\n</tool_call>"
	for _, tc := range []struct {
		name       string
		cfg        Config
		wantField  string
		wantReason any
		wantText   any
	}{
		{"parser on", Config{ReasoningParser: true, ToolParser: true}, "reasoning", "\nPlan: list.\n", "\n\nLet me look.\n"},
		{"parser on, pre-0.11 field", Config{ReasoningParser: true, ToolParser: true, ReasoningField: "reasoning_content"}, "reasoning_content", "\nPlan: list.\n", "\n\nLet me look.\n"},
		{"parser off", Config{ToolParser: true}, "reasoning", nil, "<think>\nPlan: list.\n</think>\n\nLet me look.\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Respond = Replies(Reply{Text: reply})
			s := Start(t, tc.cfg)
			status, resp := post(t, s, "/v1/chat/completions", map[string]any{
				"messages": []any{driftUser}, "tools": driftTools, "return_token_ids": true, "logprobs": true, "top_logprobs": 2,
			})
			if status != 200 {
				t.Fatalf("%d %v", status, resp)
			}
			c := choice0(t, resp)
			msg := c["message"].(map[string]any)
			if msg[tc.wantField] != tc.wantReason {
				t.Errorf("%s = %#v, want %#v", tc.wantField, msg[tc.wantField], tc.wantReason)
			}
			if msg["content"] != tc.wantText {
				t.Errorf("content = %#v, want %#v", msg["content"], tc.wantText)
			}
			calls := msg["tool_calls"].([]any)
			fn := calls[0].(map[string]any)["function"].(map[string]any)
			if fn["name"] != "exec" || fn["arguments"] != `{"cmd": "ls", "dir": "é"}` {
				t.Errorf("arguments must be re-dumped with json.dumps(ensure_ascii=False): %v", fn)
			}
			if c["finish_reason"] != "tool_calls" {
				t.Errorf("finish_reason = %v", c["finish_reason"])
			}
			ctx := context.Background()
			gen := ids(t, c["token_ids"])
			replyIDs, _ := oracle.Tokenize(ctx, "qwen3", reply)
			if !equalIDs(gen, append(replyIDs, imEnd)) {
				t.Errorf("token_ids must be the reply's real ids and <|im_end|>: %v", gen)
			}
			lp := c["logprobs"].(map[string]any)["content"].([]any)
			if len(lp) != len(gen) {
				t.Fatalf("%d logprobs for %d ids", len(lp), len(gen))
			}
			last := lp[len(lp)-1].(map[string]any)
			if last["token"] != "<|im_end|>" || last["logprob"] != Logprob(len(gen)-1, imEnd) || len(last["top_logprobs"].([]any)) != 2 {
				t.Errorf("the stop token's logprob entry: %v", last)
			}
			rendered, err := oracle.Render(ctx, "qwen3", oracle.RenderRequest{
				Messages: json.RawMessage(`[{"role":"user","content":"List the files in the working directory."}]`),
				Tools:    mustRec(t, s).Tools, AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			promptIDs, _ := oracle.Tokenize(ctx, "qwen3", rendered)
			if !equalIDs(ids(t, resp["prompt_token_ids"]), promptIDs) {
				t.Errorf("prompt_token_ids differ from the oracle's tokenization of the render")
			}
			usage := resp["usage"].(map[string]any)
			if int(usage["prompt_tokens"].(float64)) != len(promptIDs) || int(usage["completion_tokens"].(float64)) != len(gen) {
				t.Errorf("usage %v", usage)
			}
		})
	}
}

func mustRec(t *testing.T, s *Server) Received {
	t.Helper()
	rec, ok := s.Last("/v1/chat/completions")
	if !ok {
		t.Fatal("no chat request logged")
	}
	return rec
}

// TestCutToolCall: vLLM reports finish_reason tool_calls for a call the
// parser could read even when max_tokens cut the reply before </tool_call>
// (a client must check completion_tokens == max_tokens); a cut inside the JSON
// parses no call and is finish_reason length with the text as content.
func TestCutToolCall(t *testing.T) {
	ctx := context.Background()
	oracle.Require(t)
	head := "<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls -la\"}}"
	headIDs, err := oracle.Tokenize(ctx, "qwen3", head)
	if err != nil {
		t.Fatal(err)
	}
	s := Start(t, Config{ToolParser: true, Respond: Replies(Reply{Text: canonicalCall}, Reply{Text: canonicalCall})})
	for _, tc := range []struct {
		maxTokens  int
		wantFinish string
		wantCalls  bool
	}{
		{len(headIDs), "tool_calls", true},
		{len(headIDs) - 3, "length", false},
	} {
		status, resp := post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{driftUser}, "tools": driftTools, "max_tokens": tc.maxTokens})
		if status != 200 {
			t.Fatalf("%d %v", status, resp)
		}
		c := choice0(t, resp)
		usage := resp["usage"].(map[string]any)
		if c["finish_reason"] != tc.wantFinish || int(usage["completion_tokens"].(float64)) != tc.maxTokens {
			t.Errorf("max_tokens %d: finish_reason %v, completion_tokens %v; want %s, %d", tc.maxTokens, c["finish_reason"], usage["completion_tokens"], tc.wantFinish, tc.maxTokens)
		}
		msg := c["message"].(map[string]any)
		if _, has := msg["tool_calls"]; has != tc.wantCalls {
			t.Errorf("max_tokens %d: tool calls present = %v, want %v (%v)", tc.maxTokens, has, tc.wantCalls, msg)
		}
		if !tc.wantCalls && !strings.HasPrefix(msg["content"].(string), "<tool_call>\n{\"name\"") {
			t.Errorf("a cut call is returned as content: %v", msg)
		}
	}
}

// TestErrors: 404 for an unknown model and an unknown route (FastAPI's
// body), 400 over the context length, in OpenAI's error shape.
func TestErrors(t *testing.T) {
	s := Start(t, Config{MaxModelLen: 20, Respond: Replies()})
	status, resp := post(t, s, "/v1/chat/completions", map[string]any{"model": "gpt-4", "messages": []any{driftUser}})
	e, _ := resp["error"].(map[string]any)
	if status != http.StatusNotFound || e["type"] != "NotFoundError" || e["message"] != "The model `gpt-4` does not exist." || e["code"] != float64(404) {
		t.Errorf("unknown model: %d %v", status, resp)
	}
	status, resp = post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{driftSystem, driftUser}})
	e, _ = resp["error"].(map[string]any)
	if status != http.StatusBadRequest || e["type"] != "BadRequestError" || !strings.Contains(e["message"].(string), "maximum context length is 20 tokens") {
		t.Errorf("prompt over the context: %d %v", status, resp)
	}
	status, resp = post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "max_tokens": 100})
	e, _ = resp["error"].(map[string]any)
	if status != http.StatusBadRequest || !strings.Contains(e["message"].(string), "'max_tokens' is too large: 100") {
		t.Errorf("max_tokens over the context: %d %v", status, resp)
	}
	for _, path := range []string{"/v1/chat/completions/render", "/inference/v1/generate", "/v1/nothing"} {
		status, resp = post(t, s, path, map[string]any{})
		if status != http.StatusNotFound || resp["detail"] != "Not Found" {
			t.Errorf("%s without scale-out: %d %v", path, status, resp)
		}
	}
	r, err := http.Get(s.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	_ = json.NewDecoder(r.Body).Decode(&models)
	r.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != "Qwen/Qwen3-8B" || models.Data[0].MaxModelLen != 20 {
		t.Errorf("/v1/models: %+v", models)
	}
}

// TestTokenizeAndCompletions drives the token-in-token-out endpoints:
// /tokenize with messages gives the chat prompt's ids (enable_thinking
// honoured); /tokenize with a prompt adds no special tokens for Qwen; a
// /v1/completions request with those ids as the prompt generates the reply
// with legacy logprobs and token ids; /detokenize reverses; SGLang's
// /generate answers in its own shape.
func TestTokenizeAndCompletions(t *testing.T) {
	ctx := context.Background()
	s := Start(t, Config{Respond: Replies(Reply{Text: "hello there"}, Reply{Text: "second reply"}, Reply{Text: "cut here please"})})
	messages := []any{driftUser}
	status, tok := post(t, s, "/tokenize", map[string]any{"messages": messages, "chat_template_kwargs": map[string]any{"enable_thinking": false}, "return_token_strs": true})
	if status != 200 {
		t.Fatalf("%d %v", status, tok)
	}
	prompt := ids(t, tok["tokens"])
	want := "<|im_start|>user\nList the files in the working directory.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	wantIDs, _ := oracle.Tokenize(ctx, "qwen3", want)
	if !equalIDs(prompt, wantIDs) || int(tok["count"].(float64)) != len(prompt) || len(tok["token_strs"].([]any)) != len(prompt) {
		t.Errorf("/tokenize messages: %v", tok)
	}
	status, tok = post(t, s, "/tokenize", map[string]any{"prompt": "<|im_start|>hi"})
	if status != 200 || !equalIDs(ids(t, tok["tokens"]), []int32{151644, 6023}) {
		t.Errorf("/tokenize prompt: %d %v", status, tok)
	}
	status, cmp := post(t, s, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 50, "logprobs": 1, "return_token_ids": true})
	if status != 200 {
		t.Fatalf("%d %v", status, cmp)
	}
	c := choice0(t, cmp)
	gen := ids(t, c["token_ids"])
	if c["text"] != "hello there" || gen[len(gen)-1] != imEnd || c["finish_reason"] != "stop" || !equalIDs(ids(t, c["prompt_token_ids"]), prompt) {
		t.Errorf("/v1/completions: %v", c)
	}
	lp := c["logprobs"].(map[string]any)
	if len(lp["token_logprobs"].([]any)) != len(gen) || lp["token_logprobs"].([]any)[0] != Logprob(0, gen[0]) {
		t.Errorf("completion logprobs: %v", lp)
	}
	status, det := post(t, s, "/detokenize", map[string]any{"tokens": append(append([]int32{}, prompt...), gen...)})
	if status != 200 || det["prompt"] != want+"hello there<|im_end|>" {
		t.Errorf("/detokenize: %d %v", status, det)
	}
	status, sg := post(t, s, "/generate", map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": 20}, "return_logprob": true})
	if status != 200 {
		t.Fatalf("%d %v", status, sg)
	}
	out := ids(t, sg["output_ids"])
	meta := sg["meta_info"].(map[string]any)
	fr := meta["finish_reason"].(map[string]any)
	lps := meta["output_token_logprobs"].([]any)
	if sg["text"] != "second reply" || out[len(out)-1] != imEnd || fr["type"] != "stop" || fr["matched"] != float64(imEnd) || len(lps) != len(out) {
		t.Errorf("/generate: %v", sg)
	}
	if first := lps[0].([]any); first[0] != Logprob(0, out[0]) || first[1] != float64(out[0]) || first[2] != nil {
		t.Errorf("/generate logprob entries are [logprob, id, null]: %v", first)
	}
	status, sg = post(t, s, "/generate", map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": 2}})
	fr = sg["meta_info"].(map[string]any)["finish_reason"].(map[string]any)
	if status != 200 || fr["type"] != "length" || fr["length"] != float64(2) || len(ids(t, sg["output_ids"])) != 2 {
		t.Errorf("/generate cut: %d %v", status, sg)
	}
}

// TestScaleOutRoutes: with the switch on, render gives the chat prompt ids
// as a GenerateRequest, /inference/v1/generate generates from ids, and
// derender parses the ids back into a chat message with the server's
// parsers.
func TestScaleOutRoutes(t *testing.T) {
	s := Start(t, Config{EnableScaleOut: true, ReasoningParser: true, ToolParser: true,
		Respond: Replies(Reply{Text: "<think>\nok\n</think>\n\n" + canonicalCall})})
	chat := map[string]any{"model": "Qwen/Qwen3-8B", "messages": []any{driftUser}, "tools": driftTools}
	status, gr := post(t, s, "/v1/chat/completions/render", chat)
	if status != 200 {
		t.Fatalf("%d %v", status, gr)
	}
	prompt := ids(t, gr["token_ids"])
	if rec, _ := s.Last("/v1/chat/completions/render"); !equalIDs(rec.PromptIDs, prompt) || gr["sampling_params"] == nil {
		t.Errorf("render: %v", gr)
	}
	status, out := post(t, s, "/inference/v1/generate", map[string]any{"token_ids": prompt, "sampling_params": map[string]any{"max_tokens": 200, "logprobs": 0}})
	if status != 200 {
		t.Fatalf("%d %v", status, out)
	}
	c := choice0(t, out)
	gen := ids(t, c["token_ids"])
	if gen[len(gen)-1] != imEnd || c["finish_reason"] != "stop" || len(c["logprobs"].(map[string]any)["content"].([]any)) != len(gen) {
		t.Errorf("generate: %v", c)
	}
	status, der := post(t, s, "/v1/chat/completions/derender", map[string]any{"model": "Qwen/Qwen3-8B", "generate_response": out, "prompt_tokens": len(prompt), "chat_request": chat})
	if status != 200 {
		t.Fatalf("%d %v", status, der)
	}
	msg := choice0(t, der)["message"].(map[string]any)
	if msg["reasoning"] != "\nok\n" || len(msg["tool_calls"].([]any)) != 1 || choice0(t, der)["finish_reason"] != "tool_calls" {
		t.Errorf("derender: %v", der)
	}
}

// TestNonCanonicalReply: the reply's ids differ from the canonical
// tokenization of the same text, which they decode to.
func TestNonCanonicalReply(t *testing.T) {
	ctx := context.Background()
	s := Start(t, Config{Respond: Replies(Reply{Text: "hello world", NonCanonical: true})})
	_, resp := post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{driftUser}, "return_token_ids": true})
	c := choice0(t, resp)
	gen := ids(t, c["token_ids"])
	canon, _ := oracle.Tokenize(ctx, "qwen3", "hello world")
	if c["message"].(map[string]any)["content"] != "hello world" || equalIDs(gen[:len(gen)-1], canon) || len(gen)-1 != len(canon)+1 {
		t.Errorf("non-canonical reply: ids %v, canonical %v, %v", gen, canon, c["message"])
	}
}

// TestConcurrentRequests: requests in parallel are answered and logged,
// each generation drawing one reply (run under -race).
func TestConcurrentRequests(t *testing.T) {
	const n = 8
	replies := make([]Reply, n)
	for i := range replies {
		replies[i] = Reply{Text: fmt.Sprintf("reply %d", i)}
	}
	s := Start(t, Config{Respond: Replies(replies...)})
	var wg sync.WaitGroup
	seen := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		// Off the test goroutine: report with t.Errorf, never t.Fatal.
		go func(i int) {
			defer wg.Done()
			status, resp, err := postJSON(s, "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": fmt.Sprintf("q%d", i)}}})
			if err != nil || status != 200 {
				t.Errorf("%d %v %v", status, resp, err)
				return
			}
			cs, ok := resp["choices"].([]any)
			if !ok || len(cs) != 1 {
				t.Errorf("want one choice, got %v", resp)
				return
			}
			seen <- cs[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		}(i)
	}
	wg.Wait()
	close(seen)
	got := map[string]bool{}
	for c := range seen {
		got[c] = true
	}
	if len(got) != n || len(s.Requests()) != n {
		t.Errorf("%d distinct replies, %d logged; want %d", len(got), len(s.Requests()), n)
	}
}

// TestGemma3ImageParts: a multimodal deployment (Gemma 3's template, content
// parts kept as a list) writes an image part as <start_of_image> where the
// request put it. The image itself is not expanded into placeholder tokens
// (vLLM's processor would); a test of image token counts needs more than
// this simulator gives.
func TestGemma3ImageParts(t *testing.T) {
	s := Start(t, Config{Model: "google/gemma-3-4b-it", Template: "gemma3", Tokenizer: "gemma3", StopToken: "<end_of_turn>",
		ContentFormat: ContentOpenAI, Respond: Replies(Reply{Text: "A button."})})
	status, resp := post(t, s, "/v1/chat/completions", map[string]any{"return_token_ids": true, "messages": []any{
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "What is on the page?"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,iVBORw0KGgo="}},
		}},
	}})
	if status != 200 {
		t.Fatalf("%d %v", status, resp)
	}
	rec := mustRec(t, s)
	if want := "<bos><start_of_turn>user\nWhat is on the page?<start_of_image><end_of_turn>\n<start_of_turn>model\n"; rec.Prompt != want {
		t.Errorf("prompt %q, want %q", rec.Prompt, want)
	}
	c := choice0(t, resp)
	gen := ids(t, c["token_ids"])
	endOfTurn, _ := oracle.TokenID(context.Background(), "gemma3", "<end_of_turn>")
	if c["message"].(map[string]any)["content"] != "A button." || gen[len(gen)-1] != endOfTurn {
		t.Errorf("gemma3 reply: %v", c)
	}
}

// TestAutoToolChoiceNeedsAParser: vLLM refuses tools with tool_choice auto
// (the default when tools are given) unless a tool parser is configured.
func TestAutoToolChoiceNeedsAParser(t *testing.T) {
	s := Start(t, Config{Respond: Replies(Reply{Text: "fine"})})
	status, resp := post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{driftUser}, "tools": driftTools})
	if status != http.StatusBadRequest || !strings.Contains(resp["error"].(map[string]any)["message"].(string), "--enable-auto-tool-choice") {
		t.Errorf("tools without a tool parser: %d %v", status, resp)
	}
	status, resp = post(t, s, "/v1/chat/completions", map[string]any{"messages": []any{driftUser}, "tools": driftTools, "tool_choice": "none"})
	if status != 200 || !strings.Contains(mustRec(t, s).Prompt, "<tools>") {
		t.Errorf("tool_choice none still renders the tools: %d %v", status, resp)
	}
}

// TestAPIKeyOmittedIDsAndProps: --api-key guards the routes vLLM's
// middleware guards and leaves /tokenize open; a reply scripted without ids
// answers none on any route, its logprobs still naming the tokens when
// asked; GET /props reports the template llama.cpp-style; an explicit null
// max_tokens on /v1/completions leaves the rest of the context (absent: 16).
func TestAPIKeyOmittedIDsAndProps(t *testing.T) {
	ctx := context.Background()
	long := strings.Repeat("word ", 40)
	s := Start(t, Config{APIKey: "sk-sim", ServeProps: true, OwnedBy: "sglang",
		Respond: Replies(Reply{Text: "no ids here", OmitTokenIDs: true}, Reply{Text: long}, Reply{Text: long}, Reply{Text: "again", OmitTokenIDs: true})})
	status, _ := post(t, s, "/v1/completions", map[string]any{"prompt": []int32{1, 2}})
	if status != 401 {
		t.Errorf("/v1 without the key: %d", status)
	}
	if rec, _ := s.Last(""); string(rec.Response) != `{"error":"Unauthorized"}` {
		t.Errorf("401 body: %s", rec.Response)
	}
	status, tok := post(t, s, "/tokenize", map[string]any{"messages": []any{driftUser}})
	if status != 200 {
		t.Fatalf("/tokenize is not guarded: %d %v", status, tok)
	}
	prompt := ids(t, tok["tokens"])
	withKey := func(path string, body any) map[string]any {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(string(b)))
		req.Header.Set("Authorization", "Bearer sk-sim")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
		return out
	}
	cmp := withKey("/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 50, "logprobs": 0,
		"return_token_ids": true, "return_tokens_as_token_ids": true})
	c := choice0(t, cmp)
	if c["token_ids"] != nil || c["prompt_token_ids"] != nil || c["text"] != "no ids here" {
		t.Errorf("an omitted-ids reply must carry no ids: %v", c)
	}
	rec, _ := s.Last("/v1/completions")
	names := c["logprobs"].(map[string]any)["tokens"].([]any)
	if len(names) != len(rec.GeneratedIDs) || names[0] != fmt.Sprintf("token_id:%d", rec.GeneratedIDs[0]) {
		t.Errorf("logprobs name the generated tokens: %v, generated %v", names, rec.GeneratedIDs)
	}
	c = choice0(t, withKey("/v1/completions", map[string]any{"prompt": prompt, "max_tokens": nil}))
	if c["finish_reason"] != "length" {
		t.Errorf("max_tokens null is 16, as absent (normalize_null_max_tokens): %v", c)
	}
	c = choice0(t, withKey("/v1/completions", map[string]any{"prompt": prompt}))
	if c["finish_reason"] != "length" {
		t.Errorf("max_tokens absent is 16: %v", c)
	}
	sg := withKey("/generate", map[string]any{"input_ids": prompt})
	if _, has := sg["output_ids"]; has {
		t.Errorf("SGLang /generate of an omitted-ids reply: %v", sg)
	}

	var props map[string]any
	resp, err := http.Get(s.URL + "/props")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&props); err != nil {
		t.Fatal(err)
	}
	src, err := oracle.TemplateSource(ctx, "qwen3")
	if err != nil {
		t.Fatal(err)
	}
	if props["chat_template"] != src {
		t.Errorf("/props must report the template the server renders with")
	}
	models, _, err := getJSON(s, "/v1/models", "sk-sim")
	if err != nil {
		t.Fatal(err)
	}
	if owner := models["data"].([]any)[0].(map[string]any)["owned_by"]; owner != "sglang" {
		t.Errorf("owned_by %v", owner)
	}
}

func getJSON(s *Server, path, key string) (map[string]any, int, error) {
	req, _ := http.NewRequest(http.MethodGet, s.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	var out map[string]any
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out, resp.StatusCode, err
}

// vLLM's CompletionRequest makes max_tokens 16 when it is absent and, by its
// normalize_null_max_tokens validator, when it is null
// (vllm/entrypoints/openai/completion/protocol.py): never the rest of the
// context. A client that wants more must send the number.
func TestCompletionsNullMaxTokensIsSixteen(t *testing.T) {
	long := strings.Repeat("word ", 40)
	s := Start(t, Config{Respond: Replies(Reply{Text: long}, Reply{Text: long}, Reply{Text: long})})
	status, tok := post(t, s, "/tokenize", map[string]any{"messages": []any{driftUser}})
	if status != 200 {
		t.Fatalf("%d %v", status, tok)
	}
	prompt := ids(t, tok["tokens"])
	for _, body := range []map[string]any{{"prompt": prompt}, {"prompt": prompt, "max_tokens": nil}} {
		status, resp := post(t, s, "/v1/completions", body)
		if status != 200 {
			t.Fatalf("%d %v", status, resp)
		}
		if c := choice0(t, resp); c["finish_reason"] != "length" || resp["usage"].(map[string]any)["completion_tokens"] != float64(16) {
			t.Errorf("/v1/completions with max_tokens %v: want 16 tokens, cut: %v", body["max_tokens"], resp)
		}
	}
	budget := int(tok["max_model_len"].(float64)) - len(prompt)
	status, resp := post(t, s, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": budget})
	if c := choice0(t, resp); status != 200 || c["finish_reason"] != "stop" {
		t.Errorf("/v1/completions with max_tokens max_model_len - prompt: %d %v", status, resp)
	}
}
