package oracle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/forkline/forkline/internal/oracle"
)

// Render a conversation with Qwen3's real template as transformers would
// (tests call oracle.Require(t) first, which skips without the oracle), check
// the JavaScript implementation agrees, and tokenize it with Qwen3's real
// tokenizer. Examples here are compiled, not run: they need the installed
// oracle, and an example cannot skip.
func Example() {
	ctx := context.Background()
	req := oracle.RenderRequest{
		// json.RawMessage keeps key order, which tojson writes.
		Messages: json.RawMessage(`[{"role": "user", "content": "List the files."},
			{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "exec", "arguments": {"cmd": "ls"}}}]},
			{"role": "tool", "content": "a.txt"}]`),
		Tools: json.RawMessage(`[{"type": "function", "function": {"name": "exec", "description": "Run a command.",
			"parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]`),
		AddGenerationPrompt: true,
		Kwargs:              map[string]any{"enable_thinking": false},
	}
	py, err := oracle.Render(ctx, "qwen3", req) // Python's Jinja2: the reference
	if err != nil {
		fmt.Println(err)
		return
	}
	js, _ := oracle.RenderJS(ctx, "qwen3", req) // @huggingface/jinja
	ids, _ := oracle.Tokenize(ctx, "qwen3", py)
	end, _ := oracle.TokenID(ctx, "qwen3", "<|im_end|>")
	fmt.Println(py == js, strings.Contains(py, `{"name": "exec", "arguments": {"cmd": "ls"}}`), ids[len(ids)-1] != end)
}

// Every pinned template names its package, version and sha256.
func ExampleTemplateInfo() {
	for _, name := range oracle.Templates() {
		t, _ := oracle.TemplateInfo(name)
		fmt.Println(t.Name, t.Package+"@"+t.Version, t.Entry, t.Tokenizer)
	}
}
