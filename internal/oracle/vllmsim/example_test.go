package vllmsim_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/forkline/forkline/internal/oracle/vllmsim"
)

// A vLLM-like server with the qwen3 reasoning parser and the hermes tool
// parser, whose "model" answers every turn from a script; a test would call
// vllmsim.Start(t, cfg), which also closes it. Compiled, not run: it needs
// the installed oracle.
func Example() {
	s, err := vllmsim.New(context.Background(), vllmsim.Config{
		ReasoningParser: true,
		ToolParser:      true,
		Respond: func(turn vllmsim.Turn) (vllmsim.Reply, error) {
			// The rendered prompt is there to read (an observation, a tree).
			if strings.Contains(turn.Prompt, "<tool_response>") {
				return vllmsim.Reply{Text: "<think>\nDone.\n</think>\n\nThe files are a.txt and b.txt."}, nil
			}
			return vllmsim.Reply{Text: "<think>\nList them.\n</think>\n\n<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>"}, nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	// POST s.URL+"/v1/chat/completions" with "return_token_ids": true, then
	// assert on s.Requests(): the prompt, its ids, the generated ids.
	fmt.Println(s.URL != "")
}
