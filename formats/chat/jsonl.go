package chat

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/forkline/forkline/export/model"
)

// ToolArgs says how tool-call arguments are encoded in chat-jsonl.
type ToolArgs string

// The encodings.
const (
	ArgsString ToolArgs = "string" // a JSON-encoded string, as OpenAI fine-tuning requires (default)
	ArgsObject ToolArgs = "object" // a JSON object, for chat templates that apply tojson to arguments
)

// ParseToolArgs reads the -tool-args flag.
func ParseToolArgs(s string) (ToolArgs, error) {
	switch ToolArgs(s) {
	case ArgsString, ArgsObject:
		return ToolArgs(s), nil
	}
	return "", fmt.Errorf("chat: tool args %q (known: string, object)", s)
}

// JSONLWriter writes the chat-jsonl target: DIR/<split>.jsonl.
type JSONLWriter struct {
	args  ToolArgs
	tools map[string]json.RawMessage // encoded tool lists by Episode.ToolsKey
	files map[string]*jsonlFile
	err   error
}

type jsonlFile struct {
	f  *os.File
	bw *bufio.Writer
}

// NewJSONLWriter creates one file per split in dir (an empty file for a split
// that gets no episode).
func NewJSONLWriter(dir string, splits []string, args ToolArgs) (*JSONLWriter, error) {
	if args == "" {
		args = ArgsString
	}
	if _, err := ParseToolArgs(string(args)); err != nil {
		return nil, err
	}
	w := &JSONLWriter{args: args, tools: map[string]json.RawMessage{}, files: map[string]*jsonlFile{}}
	for _, s := range splits {
		f, err := os.Create(filepath.Join(dir, s+".jsonl"))
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("chat: %w", err)
		}
		w.files[s] = &jsonlFile{f: f, bw: bufio.NewWriterSize(f, 256<<10)}
	}
	return w, nil
}

// Line is one chat-jsonl example.
type Line struct {
	Messages          []LineMessage   `json:"messages"`
	Tools             json.RawMessage `json:"tools,omitempty"`
	ParallelToolCalls bool            `json:"parallel_tool_calls"`
}

// LineMessage is a message in OpenAI's shape.
type LineMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content,omitempty"`
	ToolCalls  []LineToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

// LineToolCall is an OpenAI tool call.
type LineToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // "function"
	Function LineFunction `json:"function"`
}

// LineFunction is a tool call's function; Arguments is a JSON string or a
// JSON object (ToolArgs).
type LineFunction struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Encode returns ep's chat-jsonl line, without the newline. tools is the
// encoding of ep.Tools(), nil when the episode has none.
func Encode(ep *model.Episode, tools json.RawMessage, args ToolArgs) ([]byte, error) {
	msgs, err := model.Messages(ep)
	if err != nil {
		return nil, err
	}
	line := Line{Messages: make([]LineMessage, 0, len(msgs)), Tools: tools}
	for _, m := range msgs {
		lm := LineMessage{Role: m.Role, ToolCallID: m.ToolCallID}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			lm.Content = &m.Content
		}
		for _, tc := range m.ToolCalls {
			a := tc.Arguments
			if args != ArgsObject {
				if a, err = model.EncodeJSON(string(tc.Arguments)); err != nil {
					return nil, err
				}
			}
			lm.ToolCalls = append(lm.ToolCalls, LineToolCall{ID: tc.ID, Type: "function", Function: LineFunction{Name: tc.Name, Arguments: a}})
		}
		line.Messages = append(line.Messages, lm)
	}
	return model.EncodeJSON(line)
}

// Write appends ep's line to its split's file.
func (w *JSONLWriter) Write(ep *model.Episode) error {
	if w.err != nil {
		return w.err
	}
	f, ok := w.files[ep.Split]
	if !ok {
		return fmt.Errorf("chat: episode %s: unknown split %q", ep.Row.EpisodeID, ep.Split)
	}
	var err error
	key := ep.ToolsKey()
	tools, ok := w.tools[key]
	if !ok {
		if t := ep.Tools(); t != nil {
			if tools, err = model.EncodeJSON(t); err != nil {
				return err
			}
		}
		w.tools[key] = tools
	}
	b, err := Encode(ep, tools, w.args)
	if err != nil {
		return err
	}
	if _, err := f.bw.Write(append(b, '\n')); err != nil {
		w.err = fmt.Errorf("chat: %w", err)
		return w.err
	}
	return nil
}

// Close flushes, syncs and closes every file. It is safe to call after a
// failed Write; the files are then incomplete.
func (w *JSONLWriter) Close() error {
	var errs []error
	names := make([]string, 0, len(w.files))
	for s := range w.files {
		names = append(names, s)
	}
	slices.Sort(names)
	for _, s := range names {
		f := w.files[s]
		if err := f.bw.Flush(); err != nil {
			errs = append(errs, err)
		}
		if err := f.f.Sync(); err != nil {
			errs = append(errs, err)
		}
		if err := f.f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	w.files = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	return w.err
}
