package openai

import (
	"encoding/json"

	"github.com/forkline/forkline/aci"
)

// The wire shapes of the token-in-token-out endpoints, as vLLM and SGLang
// define them (vLLM: vllm/entrypoints/serve/tokenize, .../openai/completion,
// .../serve/disagg and .../serve/render; SGLang:
// python/sglang/srt/managers/io_struct.py GenerateReqInput and
// sampling/sampling_params.py). Only what the policy sends or reads is here.

// tokenizeRequest is vLLM's POST /tokenize chat form (TokenizeChatRequest).
type tokenizeRequest struct {
	Model               string         `json:"model,omitempty"`
	Messages            []chatMessage  `json:"messages"`
	Tools               []aci.Tool     `json:"tools,omitempty"`
	AddGenerationPrompt bool           `json:"add_generation_prompt"`
	ChatTemplateKwargs  map[string]any `json:"chat_template_kwargs,omitempty"`
}

type tokenizeResponse struct {
	Tokens []int32 `json:"tokens"`
	// MaxModelLen is the context length the server serves (vLLM's
	// TokenizeResponse reports it); 0 when not reported.
	MaxModelLen int `json:"max_model_len"`
}

// renderRequest is the chat completion request vLLM's render route takes;
// only the fields that shape the prompt are sent.
type renderRequest struct {
	Model               string         `json:"model,omitempty"`
	Messages            []chatMessage  `json:"messages"`
	Tools               []aci.Tool     `json:"tools,omitempty"`
	AddGenerationPrompt bool           `json:"add_generation_prompt"`
	ChatTemplateKwargs  map[string]any `json:"chat_template_kwargs,omitempty"`
}

// renderResponse is the GenerateRequest the render route answers.
type renderResponse struct {
	TokenIDs []int32 `json:"token_ids"`
	// Features are the multimodal inputs' hashes and placeholders, opaque
	// here and passed on to generation.
	Features json.RawMessage `json:"features"`
}

// completionsRequest is vLLM's POST /v1/completions with the prompt as one
// list of token ids. MaxTokens is always sent as a number: on this route
// an absent max_tokens is 16, and so is null (CompletionRequest's
// normalize_null_max_tokens), so the rest of the context must be asked for
// by its size (Policy.maxTokens).
type completionsRequest struct {
	Model       string   `json:"model,omitempty"`
	Prompt      []int32  `json:"prompt"`
	MaxTokens   *int     `json:"max_tokens"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
	// Logprobs is the legacy integer form: 0 returns the sampled token's
	// logprob only.
	Logprobs *int `json:"logprobs,omitempty"`
	// ReturnTokenIDs asks for token_ids and prompt_token_ids (vLLM ≥
	// 0.10.2); ReturnTokensAsTokenIDs names each logprob's token
	// "token_id:N", so the generated ids survive on servers that predate
	// return_token_ids.
	ReturnTokenIDs         bool `json:"return_token_ids,omitempty"`
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids,omitempty"`
	// SkipSpecialTokens false keeps special tool tags in the text, as
	// vLLM's hermes parser does for chat requests.
	SkipSpecialTokens bool `json:"skip_special_tokens"`
}

type completionsResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Text           string  `json:"text"`
		FinishReason   string  `json:"finish_reason"`
		TokenIDs       []int32 `json:"token_ids"`
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
		Logprobs       *struct {
			Tokens        []string   `json:"tokens"`
			TokenLogprobs []*float64 `json:"token_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
}

// inferenceRequest is vLLM's POST /inference/v1/generate (GenerateRequest).
type inferenceRequest struct {
	Model          string          `json:"model,omitempty"`
	TokenIDs       []int32         `json:"token_ids"`
	Features       json.RawMessage `json:"features,omitempty"`
	SamplingParams samplingParams  `json:"sampling_params"`
	Stream         bool            `json:"stream"`
}

// samplingParams are vLLM's SamplingParams as the generate route takes them.
type samplingParams struct {
	MaxTokens         *int     `json:"max_tokens"`
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	Seed              *int64   `json:"seed,omitempty"`
	Logprobs          *int     `json:"logprobs,omitempty"`
	SkipSpecialTokens bool     `json:"skip_special_tokens"`
}

type inferenceResponse struct {
	RequestID string            `json:"request_id"`
	Choices   []inferenceChoice `json:"choices"`
}

type inferenceChoice struct {
	Index        int     `json:"index"`
	FinishReason string  `json:"finish_reason"`
	TokenIDs     []int32 `json:"token_ids"`
	Logprobs     *struct {
		Content []struct {
			Logprob float64 `json:"logprob"`
		} `json:"content"`
	} `json:"logprobs"`
}

// derenderRequest is vLLM's POST /v1/chat/completions/derender: a
// generation's ids back into a chat completion, parsed by the server's own
// reasoning and tool parsers for the chat request they answer.
type derenderRequest struct {
	Model            string              `json:"model"`
	GenerateResponse json.RawMessage     `json:"generate_response"`
	PromptTokens     int                 `json:"prompt_tokens"`
	ChatRequest      derenderChatRequest `json:"chat_request"`
}

type derenderChatRequest struct {
	Model              string         `json:"model,omitempty"`
	Messages           []chatMessage  `json:"messages"`
	Tools              []aci.Tool     `json:"tools,omitempty"`
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
}

// detokenizeRequest is vLLM's POST /detokenize.
type detokenizeRequest struct {
	Model  string  `json:"model,omitempty"`
	Tokens []int32 `json:"tokens"`
}

type detokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// sglangRequest is SGLang's native POST /generate with input_ids.
type sglangRequest struct {
	InputIDs       []int32        `json:"input_ids"`
	SamplingParams sglangSampling `json:"sampling_params"`
	ReturnLogprob  bool           `json:"return_logprob"`
	Stream         bool           `json:"stream"`
}

// sglangSampling holds only fields SGLang's SamplingParams declares: it
// refuses others.
type sglangSampling struct {
	MaxNewTokens      *int     `json:"max_new_tokens"`
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	SamplingSeed      *int64   `json:"sampling_seed,omitempty"`
	SkipSpecialTokens bool     `json:"skip_special_tokens"`
}

type sglangResponse struct {
	Text      string  `json:"text"`
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		FinishReason struct {
			Type string `json:"type"`
		} `json:"finish_reason"`
		// OutputTokenLogprobs are [logprob, token id, text or null] per
		// generated token.
		OutputTokenLogprobs [][]json.RawMessage `json:"output_token_logprobs"`
	} `json:"meta_info"`
}
