package openai

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

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

// ErrOption is wrapped by every error ParseOptions and Validate return.
var ErrOption = errors.New("openai: bad option")

// Config configures the policy. Start from DefaultConfig, or build it from
// string options with ParseOptions. It never holds the API key, only the name
// of the environment variable the key is read from at request time, so a
// Config (and the options it came from) may be recorded anywhere.
type Config struct {
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
	// Actions are the canonical actions offered to the model; every kind
	// by default.
	Actions []runtime.ActionKind
	// ObservationCap is the most bytes of an observation's output sent back
	// to the model; a longer one keeps its head and tail around an explicit
	// marker. 0 sends everything.
	ObservationCap int
	// SystemPrompt replaces the default system prompt. "{{tools}}" in it is
	// replaced by a listing of the offered tools and their argument schemas.
	SystemPrompt string

	// TokenIDs requests prompt and response token ids (vLLM
	// return_token_ids, SGLang return_token_ids and return_prompt_token_ids);
	// Logprobs requests one logprob per generated token. Both default to on;
	// turn them off for servers that reject the fields.
	TokenIDs bool
	Logprobs bool

	// HTTPClient sends the requests; nil uses a shared client. Its own
	// Timeout should be zero: Timeout above bounds each attempt.
	HTTPClient *http.Client
	// Logf, when set, receives one line per retried request. It never sees
	// request headers.
	Logf func(format string, args ...any)
}

// DefaultConfig returns the defaults: no base URL yet, native tools, every
// action, token ids and logprobs requested.
func DefaultConfig() Config {
	return Config{
		APIKeyEnv:      DefaultAPIKeyEnv,
		Timeout:        DefaultTimeout,
		Retries:        DefaultRetries,
		Backoff:        DefaultBackoff,
		BackoffMax:     DefaultBackoffMax,
		ToolMode:       ToolsNative,
		Actions:        runtime.ActionKinds(),
		ObservationCap: DefaultObservationCap,
		TokenIDs:       true,
		Logprobs:       true,
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
	"actions": {"comma-separated canonical actions offered to the model (default all)", func(c *Config, v string) error {
		c.Actions = nil
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				c.Actions = append(c.Actions, runtime.ActionKind(k))
			}
		}
		return nil
	}},
	"observation_cap": {"most bytes of an observation sent to the model, 0 for all (default 16384)", func(c *Config, v string) error {
		n, err := parseInt(v, 0)
		c.ObservationCap = n
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
	return c, c.Validate()
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrOption}, args...)...)
	}
	if _, err := endpoint(c.BaseURL); err != nil {
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
	if len(c.Actions) == 0 {
		return bad("no actions offered")
	}
	for _, k := range c.Actions {
		if _, _, ok := runtime.ActionFieldNames(k); !ok {
			return bad("action %q is not canonical (known: %s)", k, kindNames(runtime.ActionKinds()))
		}
	}
	if c.ObservationCap < 0 {
		return bad("observation_cap is negative")
	}
	if c.MaxTokens < 0 {
		return bad("max_tokens is negative")
	}
	return nil
}

// endpoint turns a base URL into the chat completions URL. It accepts any
// http(s) URL with a host, with or without the /chat/completions suffix, and
// refuses credentials in the URL: they would be recorded with the options.
func endpoint(base string) (string, error) {
	if base == "" {
		return "", errors.New("base_url is required (e.g. http://127.0.0.1:8000/v1)")
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("base_url: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("base_url %q: want an http or https URL", base)
	}
	if u.Host == "" {
		return "", fmt.Errorf("base_url %q has no host", base)
	}
	if u.User != nil {
		return "", errors.New("base_url carries credentials; put the key in the environment variable named by api_key_env instead")
	}
	if u.Fragment != "" {
		return "", fmt.Errorf("base_url %q has a fragment", base)
	}
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, "/chat/completions") {
		p += "/chat/completions"
	}
	u.Path = p
	u.RawPath = ""
	return u.String(), nil
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
