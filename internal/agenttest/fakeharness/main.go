// Command fakeharness is a test harness for -policy agent harness=command:
// a scripted agent that calls forkline's gateway (Chat Completions, at
// OPENAI_BASE_URL with OPENAI_API_KEY) the way a real harness may, to
// show what forkline records when a harness does something the real
// three did not do in the tests. Its first argument says what:
//
//	rewrite   four calls with one tool: the first, one that extends it
//	          (the call's result), one that drops the earlier turns for a
//	          summary (compaction: history_rewritten), one with another
//	          system prompt (system_changed); then exits 0
//	image     one call whose user message holds an image, which the
//	          gateway cannot translate; exits 1 on the refusal
//	title     a call without tools (a side call), then the rewrite
//	          script's first two calls
//
// It is built by the tests that run it (statically, so it runs in any
// sandbox) and knows the chat API's wire shape only.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
)

type message struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

var tool = json.RawMessage(`{"type":"function","function":{"name":"run","description":"Run a command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}}`)

func str(s string) *string { return &s }

// call posts one chat completion; it returns the reply message, or exits
// with the answer when the gateway refuses.
func call(msgs []message, tools bool) message {
	body := map[string]any{"model": os.Getenv("FORKLINE_MODEL"), "messages": msgs}
	if tools {
		body["tools"] = []json.RawMessage{tool}
	}
	return post(body)
}

func post(body any) message {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, os.Getenv("OPENAI_BASE_URL")+"/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+os.Getenv("OPENAI_API_KEY"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeharness:", err)
		os.Exit(2)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		fmt.Fprintf(os.Stderr, "fakeharness: %d %s\n", resp.StatusCode, data)
		os.Exit(1)
	}
	var out struct {
		Choices []struct {
			Message message `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Choices) == 0 {
		fmt.Fprintf(os.Stderr, "fakeharness: unreadable answer %s\n", data)
		os.Exit(2)
	}
	return out.Choices[0].Message
}

// results answers every call of reply with "ok".
func results(reply message) []message {
	var out []message
	for _, c := range reply.ToolCalls {
		out = append(out, message{Role: "tool", ToolCallID: c.ID, Content: str("ok: " + c.Function.Arguments)})
	}
	return out
}

func main() {
	mode := ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	sys := message{Role: "system", Content: str("You are a test harness.")}
	user := message{Role: "user", Content: str(os.Getenv("FORKLINE_INSTRUCTION"))}
	switch mode {
	case "image":
		post(map[string]any{"model": "m", "messages": []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "image_url", "image_url": map[string]string{"url": "data:image/png;base64,iVBORw0KGgo="}}}},
		}})
		fmt.Println("fakeharness: the image call was answered")
	case "title":
		call([]message{sys, {Role: "user", Content: str("Generate a title for: " + *user.Content)}}, false)
		fallthrough
	case "rewrite":
		conv := []message{sys, user}
		r1 := call(conv, true)
		conv = append(append(conv, r1), results(r1)...)
		r2 := call(conv, true)
		if mode == "title" {
			fmt.Println("fakeharness: done")
			return
		}
		_ = r2 // its result is dropped with the turns before it:
		// Compaction: the turns so far become one summary.
		compacted := []message{sys, user, {Role: "user", Content: str("Summary of the work so far: two commands ran.")}}
		r3 := call(compacted, true)
		// A new system prompt.
		call([]message{{Role: "system", Content: str("You are a careful test harness.")}, user, r3, results(r3)[0]}, true)
		fmt.Println("fakeharness: done")
	default:
		fmt.Fprintln(os.Stderr, "fakeharness: want rewrite, image or title")
		os.Exit(2)
	}
}
