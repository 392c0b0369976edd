package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// ParseText finds the tool calls a model wrote as text, for servers or models
// without native tool calling. It accepts, in this order of precedence:
//
//  1. <tool_call>{json}</tool_call> blocks (Hermes, Qwen and many others);
//     a last block left open — servers often stop at the closing tag — counts
//     when its JSON is complete;
//  2. fenced code blocks tagged json, tool_call or untagged, whose content is
//     a JSON object;
//  3. an answer that is nothing but a JSON object.
//
// The JSON is {"name": TOOL, "arguments": {...}} ("parameters" is accepted
// for "arguments", and the OpenAI {"type":"function","function":{...}}
// wrapper is unwrapped) or a canonical action {"kind": KIND, ...fields}.
//
// No call at all is (nil, nil). A <tool_call> block that is not such JSON, or
// a fenced block of broken JSON that mentions "name" or "kind", is an error
// wrapping ErrUnparsed: the model tried to act and failed. Other fenced JSON
// (valid JSON of another shape, broken JSON without those keys) is data, not
// a call, and is ignored.
func ParseText(text string) ([]Call, error) {
	if blocks, open := toolCallBlocks(text); len(blocks) > 0 {
		var calls []Call
		for i, b := range blocks {
			c, ok, err := objectCall([]byte(b))
			if err == nil && !ok {
				err = fmt.Errorf("no \"name\" or \"kind\"")
			}
			if err != nil {
				if open && i == len(blocks)-1 && len(calls) > 0 {
					break // an unfinished trailing block after complete ones
				}
				return nil, fmt.Errorf("%w: <tool_call> block %d: %v", ErrUnparsed, i+1, err)
			}
			calls = append(calls, c)
		}
		return calls, nil
	}
	var calls []Call
	for i, b := range fencedBlocks(text) {
		c, ok, err := objectCall([]byte(b))
		if err != nil {
			if !strings.Contains(b, `"name"`) && !strings.Contains(b, `"kind"`) {
				continue // broken JSON that does not look like a call: data
			}
			return nil, fmt.Errorf("%w: fenced block %d: %v", ErrUnparsed, i+1, err)
		}
		if ok {
			calls = append(calls, c)
		}
	}
	if len(calls) > 0 {
		return calls, nil
	}
	if t := strings.TrimSpace(text); strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
		c, ok, err := objectCall([]byte(t))
		if err == nil && ok {
			return []Call{c}, nil
		}
	}
	return nil, nil
}

// toolCallBlocks returns the contents of <tool_call> blocks, and whether the
// last one was never closed.
func toolCallBlocks(text string) (blocks []string, open bool) {
	const start, end = "<tool_call>", "</tool_call>"
	for {
		i := strings.Index(text, start)
		if i < 0 {
			return blocks, false
		}
		text = text[i+len(start):]
		j := strings.Index(text, end)
		if j < 0 {
			return append(blocks, strings.TrimSpace(text)), true
		}
		blocks = append(blocks, strings.TrimSpace(text[:j]))
		text = text[j+len(end):]
	}
}

// fencedBlocks returns the contents of ``` blocks tagged json, tool_call,
// tool or nothing, whose content starts with "{".
func fencedBlocks(text string) []string {
	var out []string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "```") {
			continue
		}
		tag := strings.ToLower(strings.TrimSpace(strings.TrimPrefix(l, "```")))
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == "```" {
				closed = true
				break
			}
			body = append(body, lines[i])
		}
		if !closed {
			break
		}
		content := strings.TrimSpace(strings.Join(body, "\n"))
		switch tag {
		case "", "json", "tool_call", "tool":
			if strings.HasPrefix(content, "{") {
				out = append(out, content)
			}
		}
	}
	return out
}

// objectCall reads one JSON object as a call. ok is false for valid JSON of
// another shape; err is set for JSON that does not decode.
func objectCall(b []byte) (c Call, ok bool, err error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(b), &obj); err != nil {
		return Call{}, false, err
	}
	if fn, has := obj["function"]; has {
		var inner map[string]json.RawMessage
		if json.Unmarshal(fn, &inner) == nil {
			obj = inner
		}
	}
	if n, has := obj["name"]; has {
		var name string
		if err := json.Unmarshal(n, &name); err != nil {
			return Call{}, false, fmt.Errorf("\"name\" is not a string")
		}
		args, has := obj["arguments"]
		if !has {
			args = obj["parameters"]
		}
		return Call{Name: name, Arguments: args}, true, nil
	}
	if k, has := obj["kind"]; has {
		var kind string
		if err := json.Unmarshal(k, &kind); err != nil {
			return Call{}, false, fmt.Errorf("\"kind\" is not a string")
		}
		delete(obj, "kind")
		args, _ := json.Marshal(obj)
		return Call{Name: kind, Arguments: args}, true, nil
	}
	return Call{}, false, nil
}
