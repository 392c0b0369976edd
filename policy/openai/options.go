package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

// Tool modes, policy's own (the manifest records them as they are).
const (
	// ToolsNative offers the actions as function-calling tools and reads the
	// server's tool_calls (falling back to the text dialects when the answer
	// carries none).
	ToolsNative = policy.ToolsNative
	// ToolsText describes the actions in the system prompt and parses the
	// answer's text only, for servers without tool calling.
	ToolsText = policy.ToolsText
)

// Defaults.
const (
	DefaultAPIKeyEnv      = "OPENAI_API_KEY"
	DefaultTimeout        = 5 * time.Minute
	DefaultRetries        = 4
	DefaultBackoff        = time.Second
	DefaultBackoffMax     = 30 * time.Second
	DefaultObservationCap = 16 << 10 // bytes of observation output shown to the model
)

// Client-side parsers of token-in-token-out turns (Config.ToolParser,
// Config.ReasoningParser).
const (
	// ToolParserHermes reads <tool_call>{"name": ..., "arguments": ...}</tool_call>
	// blocks as vLLM's hermes parser does (Hermes, Qwen2.5, Qwen3 and many
	// others write their calls so).
	ToolParserHermes = "hermes"
	// ToolParserServer has the server parse the generated ids with its own
	// reasoning and tool parsers, through vLLM's derender route
	// (/v1/chat/completions/derender, served with --enable-scale-out).
	ToolParserServer = "server"
	// ReasoningParserQwen3 splits a <think>...</think> block off as the
	// turn's reasoning.
	ReasoningParserQwen3 = "qwen3"
	// ReasoningParserNone keeps the generated text whole as content.
	ReasoningParserNone = "none"
)

// Server kinds (Config.Server): what the server is, which decides the
// request fields only it reads and its generation endpoint.
const (
	ServerAuto   = "auto"   // ask GET /v1/models once: owned_by "vllm", "sglang" or "llamacpp"
	ServerVLLM   = "vllm"   // vLLM
	ServerSGLang = "sglang" // SGLang
	ServerOther  = "other"  // anything else (hosted APIs, proxies)
)

// ErrOption is wrapped by every error ParseOptions and Validate return.
var ErrOption = errors.New("openai: bad option")

// Config configures the policy. Start from DefaultConfig, or build it from
// string options with ParseOptions. It never holds the API key, only the name
// of the environment variable the key is read from at request time, so a
// Config (and the options it came from) may be recorded anywhere.
type Config struct {
	// shell is the episode's task's shell mode (policy.Episode.Shell), not
	// an option: the exec tool's description says it.
	shell string
	// BaseURL is the server's OpenAI-compatible API root, e.g.
	// http://127.0.0.1:8000/v1; requests go to BaseURL + /chat/completions.
	BaseURL string
	// Model is sent as "model"; empty leaves it out (vLLM then uses the
	// model it serves; hosted APIs need it).
	Model string
	// APIKeyEnv names the environment variable holding the API key. An unset
	// or empty variable sends no Authorization header, unless APIKeyRequired.
	APIKeyEnv      string
	APIKeyRequired bool

	// Sampling parameters; nil or zero leaves the server's default.
	Temperature *float64
	TopP        *float64
	MaxTokens   int
	// Seed is sent with every request. The collector mixes it with each
	// episode's id first, so repeats of a task sample differently and a
	// rerun of an episode sends the same seed.
	Seed *int64

	// Timeout bounds one request attempt. Retries is how many times a
	// request is repeated after a 429, a 5xx, a timeout or a broken
	// connection (never after another 4xx), waiting Backoff·2^n with jitter,
	// at most BackoffMax (or the server's Retry-After, within BackoffMax).
	Timeout    time.Duration
	Retries    int
	Backoff    time.Duration
	BackoffMax time.Duration

	// ToolMode is ToolsNative or ToolsText.
	ToolMode policy.ToolMode
	// Actions are the canonical actions offered to the model; nil (the
	// default) offers each episode the actions its task allows
	// (policy.Episode.Actions), every kind when the episode does not say.
	Actions []runtime.ActionKind
	// ObservationCap is the most bytes of an observation's output sent back
	// to the model; a longer one keeps its head and tail around an explicit
	// marker. 0 sends everything.
	ObservationCap int
	// Observe is what the model is shown of GUI observations (the url and
	// title only; screenshots as image_url parts; the accessibility tree
	// as compact text, aci.ObserveA11y, the default, since every model can
	// read it; or both) and of a GUI episode's start page. Images need a VLM server and chat mode: the
	// token-in-token-out routes take token ids, and an image's placeholder
	// ids carry no pixels.
	Observe aci.Observe
	// MaxImages is how many of the latest screenshots stay images in the
	// context (0: all); older ones become aci.ImageNote.
	MaxImages int
	// SystemPrompt replaces the default system prompt. "{{tools}}" in it is
	// replaced by a listing of the offered tools and their argument schemas.
	SystemPrompt string

	// TokenIDs requests prompt and response token ids (vLLM
	// return_token_ids, SGLang return_token_ids and return_prompt_token_ids);
	// Logprobs requests one logprob per generated token. Both default to on;
	// turn them off for servers that reject the fields.
	TokenIDs bool
	Logprobs bool

	// Tokens is the token mode: policy.TokensAuto (the default: token in,
	// token out when the server offers it, chat otherwise), TokensTITO
	// (token in, token out, or the run stops) or TokensChat.
	Tokens policy.TokenMode
	// ToolParser and ReasoningParser parse a token-in-token-out turn's
	// generated text into tool calls (ToolParserHermes, ToolParserServer)
	// and reasoning (ReasoningParserQwen3, ReasoningParserNone). In chat
	// mode the server's parsers do.
	ToolParser      string
	ReasoningParser string
	// ChatTemplateKwargs are sent with every request as
	// chat_template_kwargs (enable_thinking, truncate_history_thinking,
	// ...), and with every render of a token-in-token-out turn.
	ChatTemplateKwargs map[string]any
	// SendReasoning sends the reasoning a server split off a reply
	// (message.reasoning, or reasoning_content) back on that assistant
	// turn in chat mode, in the field it came in, so that a template that
	// keeps recent reasoning (Qwen3's) re-renders the turn as generated.
	// On by default; turn it off for hosted APIs that reject the field.
	SendReasoning bool
	// Server is what the server is (ServerAuto asks it once per run).
	Server string
	// RenderURL, when set, is another server that renders the chat
	// template for token-in-token-out turns (for example vLLM's
	// GPU-less `vllm launch render` beside an SGLang engine); requests to
	// it carry no API key unless it is on base_url's host.
	RenderURL string

	// HTTPClient sends the requests; nil uses a shared client. Its own
	// Timeout should be zero: Timeout above bounds each attempt.
	HTTPClient *http.Client
	// Logf, when set, receives one line per retried request, and the
	// probe's warnings. It never sees request headers.
	Logf func(format string, args ...any)
	// Infof, when set, receives the probe's notes of what it chose (token
	// in, token out over which routes); nil sends them to Logf.
	Infof func(format string, args ...any)
}

// DefaultConfig returns the defaults: no base URL yet, native tools, every
// action, token ids and logprobs requested.
func DefaultConfig() Config {
	return Config{
		APIKeyEnv:       DefaultAPIKeyEnv,
		Timeout:         DefaultTimeout,
		Retries:         DefaultRetries,
		Backoff:         DefaultBackoff,
		BackoffMax:      DefaultBackoffMax,
		ToolMode:        ToolsNative,
		ObservationCap:  DefaultObservationCap,
		Observe:         aci.ObserveA11y,
		TokenIDs:        true,
		Logprobs:        true,
		Tokens:          policy.TokensAuto,
		ToolParser:      ToolParserHermes,
		ReasoningParser: ReasoningParserQwen3,
		SendReasoning:   true,
		Server:          ServerAuto,
	}
}

// option describes one string option: what it means and how it is applied.
type option struct {
	help  string
	apply func(c *Config, v string) error
}

var options = map[string]option{
	"base_url": {"server API root, http(s)://host[:port]/v1 (required)", func(c *Config, v string) error {
		c.BaseURL = v
		return nil
	}},
	"model": {"model name sent with each request", func(c *Config, v string) error {
		c.Model = v
		return nil
	}},
	"api_key_env": {"environment variable holding the API key (default " + DefaultAPIKeyEnv + "); when given, it must be set", func(c *Config, v string) error {
		c.APIKeyEnv, c.APIKeyRequired = v, true
		return nil
	}},
	"temperature": {"sampling temperature", func(c *Config, v string) error {
		f, err := parseFloat(v, 0, 2)
		c.Temperature = &f
		return err
	}},
	"top_p": {"nucleus sampling mass in (0, 1]", func(c *Config, v string) error {
		f, err := parseFloat(v, 0, 1)
		if err == nil && f == 0 {
			err = errors.New("must be greater than 0")
		}
		c.TopP = &f
		return err
	}},
	"max_tokens": {"most tokens generated per turn", func(c *Config, v string) error {
		n, err := parseInt(v, 1)
		c.MaxTokens = n
		return err
	}},
	"seed": {"sampling seed sent with every request (repeats then sample alike)", func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		c.Seed = &n
		return err
	}},
	"timeout": {"per-request timeout, a Go duration (default 5m)", func(c *Config, v string) error {
		d, err := parseDuration(v)
		c.Timeout = d
		return err
	}},
	"retries": {"retries after 429, 5xx, timeouts and broken connections (default 4)", func(c *Config, v string) error {
		n, err := parseInt(v, 0)
		c.Retries = n
		return err
	}},
	"backoff": {"first retry delay, doubled per retry, with jitter (default 1s)", func(c *Config, v string) error {
		d, err := parseDuration(v)
		c.Backoff = d
		return err
	}},
	"backoff_max": {"longest retry delay (default 30s)", func(c *Config, v string) error {
		d, err := parseDuration(v)
		c.BackoffMax = d
		return err
	}},
	"tool_mode": {"native (function calling) or text (tool calls parsed from the answer)", func(c *Config, v string) error {
		c.ToolMode = policy.ToolMode(v)
		return nil
	}},
	"actions": {"comma-separated canonical actions offered to the model, the same for every task; done is always offered, added last when not listed (default: the actions each task allows)", func(c *Config, v string) error {
		c.Actions = []runtime.ActionKind{}
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				c.Actions = append(c.Actions, runtime.ActionKind(k))
			}
		}
		// Every task allows done (docs/TASKS.md): without it a model can
		// never finish, and every episode would end no_action.
		if len(c.Actions) > 0 && !slices.Contains(c.Actions, runtime.ActDone) {
			c.Actions = append(c.Actions, runtime.ActDone)
		}
		return nil
	}},
	"observation_cap": {"most bytes of an observation sent to the model, 0 for all (default 16384)", func(c *Config, v string) error {
		n, err := parseInt(v, 0)
		c.ObservationCap = n
		return err
	}},
	"observe": {"what the model is shown of GUI observations and the start page: a11y (the accessibility tree as compact text, which every model reads; the default), text (url and title only), screenshot (image_url parts, base64 PNG data URLs, for vision models) or both", func(c *Config, v string) error {
		m, err := aci.ParseObserve(v)
		c.Observe = m
		return err
	}},
	"max_images": {"most screenshots kept as images in the context, the latest ones; older ones become a short text note (default 0: all)", func(c *Config, v string) error {
		n, err := parseInt(v, 1)
		c.MaxImages = n
		return err
	}},
	"system_prompt_file": {"file whose text replaces the system prompt; {{tools}} in it lists the tools", func(c *Config, v string) error {
		b, err := os.ReadFile(v)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) == "" {
			return fmt.Errorf("%s is empty", v)
		}
		c.SystemPrompt = string(b)
		return nil
	}},
	"token_ids": {"request prompt and response token ids: true or false (default true)", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		c.TokenIDs = b
		return err
	}},
	"logprobs": {"request per-token logprobs: true or false (default true)", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		c.Logprobs = b
		return err
	}},
	"tokens": {"token ids from: auto (token in, token out when the server offers it, else chat; the default), tito (token in, token out, or the run stops) or chat", func(c *Config, v string) error {
		c.Tokens = policy.TokenMode(v)
		return nil
	}},
	"tool_parser": {"how token-in-token-out turns' tool calls are parsed: hermes (<tool_call> blocks; the default) or server (the server's own parsers, through vLLM's derender route)", func(c *Config, v string) error {
		c.ToolParser = v
		return nil
	}},
	"reasoning_parser": {"how token-in-token-out turns' reasoning is split off: qwen3 (<think>...</think>; the default) or none", func(c *Config, v string) error {
		c.ReasoningParser = v
		return nil
	}},
	"chat_template_kwargs": {`chat template variables sent with every request, a JSON object (e.g. {"enable_thinking": false})`, func(c *Config, v string) error {
		kw, err := policy.DecodeTemplateKwargs(mustQuote(v))
		c.ChatTemplateKwargs = kw
		return err
	}},
	"send_reasoning": {"send the reasoning a server split off back on its assistant turn (chat mode): true or false (default true; false for hosted APIs that reject the field)", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		c.SendReasoning = b
		return err
	}},
	"server": {"what the server is: auto (asked once, GET /v1/models; the default), vllm, sglang or other", func(c *Config, v string) error {
		c.Server = v
		return nil
	}},
	"render_url": {"another server that renders the chat template for token-in-token-out turns (vLLM /tokenize or its render route), e.g. a `vllm launch render` beside SGLang", func(c *Config, v string) error {
		c.RenderURL = v
		return nil
	}},
}

// tokenOnlyOptions mean something only to token-in-token-out turns: given
// with tokens=chat they would be ignored, so they are refused.
var tokenOnlyOptions = []string{"tool_parser", "reasoning_parser", "render_url"}

// mustQuote wraps an option's text as a JSON string for the decoders that
// read both forms.
func mustQuote(v string) []byte {
	b, _ := json.Marshal(v)
	return b
}

// OptionNames lists the option keys ParseOptions knows, sorted.
func OptionNames() []string {
	out := make([]string, 0, len(options))
	for k := range options {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// OptionHelp returns the one-line description of an option key.
func OptionHelp(key string) string { return options[key].help }

// ParseOptions builds a Config from string options (collect's -policy-opt
// key=value pairs) over DefaultConfig and validates it. An unknown key fails
// with the list of known ones.
func ParseOptions(opts map[string]string) (Config, error) {
	c := DefaultConfig()
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o, ok := options[k]
		if !ok {
			return c, fmt.Errorf("%w: unknown option %q (known: %s)", ErrOption, k, strings.Join(OptionNames(), ", "))
		}
		if err := o.apply(&c, strings.TrimSpace(opts[k])); err != nil {
			return c, fmt.Errorf("%w: %s=%q: %v", ErrOption, k, opts[k], err)
		}
	}
	if _, given := opts["max_images"]; given && !c.Observe.Images() {
		return c, fmt.Errorf("%w: max_images applies to images, and observe=%s shows none (use observe=screenshot or both)", ErrOption, c.Observe)
	}
	if c.Tokens == policy.TokensChat {
		for _, k := range tokenOnlyOptions {
			if _, given := opts[k]; given {
				return c, fmt.Errorf("%w: %s applies to token-in-token-out turns only, and tokens=chat has none (the server parses and renders chat turns)", ErrOption, k)
			}
		}
	}
	return c, c.Validate()
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrOption}, args...)...)
	}
	if _, err := parseServerURL(c.BaseURL, "base_url"); err != nil {
		return bad("%v", err)
	}
	if c.APIKeyEnv == "" {
		return bad("api_key_env is empty")
	}
	if c.APIKeyRequired && os.Getenv(c.APIKeyEnv) == "" {
		return bad("api_key_env names %s, which is not set", c.APIKeyEnv)
	}
	if c.Timeout <= 0 {
		return bad("timeout must be positive")
	}
	if c.Retries < 0 || c.Retries > 100 {
		return bad("retries %d is not within 0..100", c.Retries)
	}
	if c.Backoff <= 0 || c.BackoffMax < c.Backoff {
		return bad("backoff %s and backoff_max %s: want 0 < backoff <= backoff_max", c.Backoff, c.BackoffMax)
	}
	if c.ToolMode != ToolsNative && c.ToolMode != ToolsText {
		return bad("tool_mode %q is not known (known: %s, %s)", c.ToolMode, ToolsNative, ToolsText)
	}
	if c.Actions != nil && len(c.Actions) == 0 {
		return bad("no actions offered")
	}
	for _, k := range c.Actions {
		if _, _, ok := runtime.ActionFieldNames(k); !ok {
			return bad("action %q is not canonical (known: %s)", k, kindNames(runtime.ActionKinds()))
		}
	}
	if _, err := aci.ParseObserve(string(c.Observe)); err != nil {
		return bad("%v", err)
	}
	if c.MaxImages < 0 {
		return bad("max_images is negative")
	}
	if c.Observe.Images() && c.Tokens == policy.TokensTITO {
		return bad("observe=%s sends images, and tokens=tito sends token ids only (an image's placeholder ids carry no pixels): use tokens=auto or chat", c.Observe)
	}
	if c.ObservationCap < 0 {
		return bad("observation_cap is negative")
	}
	if c.MaxTokens < 0 {
		return bad("max_tokens is negative")
	}
	if !slices.Contains(policy.TokenModes(), c.Tokens) {
		return bad("tokens %q is not known (known: auto, tito, chat)", c.Tokens)
	}
	if c.Tokens == policy.TokensTITO && !c.TokenIDs {
		return bad("tokens=tito keeps the episode's token ids, and token_ids=false asks for none")
	}
	if c.ToolParser != ToolParserHermes && c.ToolParser != ToolParserServer {
		return bad("tool_parser %q is not known (known: %s, %s)", c.ToolParser, ToolParserHermes, ToolParserServer)
	}
	if c.ReasoningParser != ReasoningParserQwen3 && c.ReasoningParser != ReasoningParserNone {
		return bad("reasoning_parser %q is not known (known: %s, %s)", c.ReasoningParser, ReasoningParserQwen3, ReasoningParserNone)
	}
	if !slices.Contains([]string{ServerAuto, ServerVLLM, ServerSGLang, ServerOther}, c.Server) {
		return bad("server %q is not known (known: auto, vllm, sglang, other)", c.Server)
	}
	if c.RenderURL != "" {
		if _, err := parseServerURL(c.RenderURL, "render_url"); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

func parseFloat(v string, lo, hi float64) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, errors.New("not a number")
	}
	if f < lo || f > hi {
		return 0, fmt.Errorf("not within %g..%g", lo, hi)
	}
	return f, nil
}

func parseInt(v string, min int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, errors.New("not an integer")
	}
	if n < min {
		return 0, fmt.Errorf("must be at least %d", min)
	}
	return n, nil
}

func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errors.New("not a duration (e.g. 30s, 2m)")
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
}

func kindNames(ks []runtime.ActionKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}
