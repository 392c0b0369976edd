package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// The APIs a call may come in (Call.API).
const (
	APIMessages  = "anthropic-messages" // Anthropic Messages, POST /v1/messages
	APIResponses = "openai-responses"   // OpenAI Responses, POST /v1/responses
	APIChat      = "openai-chat"        // OpenAI Chat Completions, POST /v1/chat/completions
)

// The roles of the canonical conversation.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one message of the canonical conversation, the chat API's:
// Content is the text (text parts joined by "\n", as vLLM joins a
// message's text parts for a template that takes strings); an assistant
// message may carry Reasoning and ToolCalls, a tool message answers
// ToolCallID (IsError: the harness marked the result as a failure, which
// only the Anthropic API can say; the model is shown the text).
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	Reasoning  string     `json:"reasoning,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	IsError    bool       `json:"is_error,omitempty"`
}

// ToolCall is one function call: its id, the tool's name and the
// arguments as JSON text (as the model wrote them in a reply; as the
// harness re-encoded them when it echoes a call back).
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is one function tool the harness offers: its name, description and
// the JSON Schema of its arguments as the harness wrote it (compacted).
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// ChatJSON is the tool as the chat API carries it:
// {"type":"function","function":{"name","description","parameters"}}.
func (t Tool) ChatJSON() json.RawMessage {
	var b bytes.Buffer
	b.WriteString(`{"type":"function","function":{"name":`)
	b.Write(encodeString(t.Name))
	if t.Description != "" {
		b.WriteString(`,"description":`)
		b.Write(encodeString(t.Description))
	}
	b.WriteString(`,"parameters":`)
	params := t.Parameters
	if len(params) == 0 {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	b.Write(params)
	b.WriteString(`}}`)
	return b.Bytes()
}

// Call is one model call of a harness, translated.
type Call struct {
	// API is the API it came in (APIMessages, APIResponses, APIChat).
	API string
	// Model is the model the harness named.
	Model string
	// Messages is the harness's whole conversation as it sent it.
	Messages []Message
	// Tools are the function tools it offered, in its order.
	Tools []Tool
	// Dropped names the tools the gateway left out, each "NAME (why)":
	// hosted tools (web search), tools deferred until the harness loads
	// them, tool kinds a chat model cannot call (namespaces, free-form
	// grammars).
	Dropped []string
	// Stream reports that the harness asked for server-sent events.
	Stream bool
	// MaxTokens is the output limit the harness asked for, 0 when it did
	// not say. The run's own limit is what the model server is sent.
	MaxTokens int

	// includeUsage: a streaming Chat Completions call asked for the usage
	// chunk (stream_options.include_usage).
	includeUsage bool
}

// Reply is the model's answer to a Call.
type Reply struct {
	Content   string
	Reasoning string
	Calls     []ToolCall
	// Finish is FinishStop, FinishToolCalls or FinishLength.
	Finish string
	// PromptTokens and CompletionTokens are the usage the harness is told.
	PromptTokens, CompletionTokens int
}

// The finish reasons of a Reply.
const (
	FinishStop      = "stop"
	FinishToolCalls = "tool_calls"
	FinishLength    = "length" // cut at the output limit
)

// Handler answers the calls of one episode. The gateway calls it from the
// goroutine of each HTTP request, so calls may overlap (a harness's side
// calls beside its main loop); it must be safe for that.
type Handler interface {
	// Call answers c. ctx ends when the harness hangs up. An *Error is
	// answered with its status and type; any other error as a 500
	// api_error with its text.
	Call(ctx context.Context, c *Call) (*Reply, error)
	// Refused is told of a request of the episode that the gateway could
	// not translate, and why; the harness got a 4xx saying so.
	Refused(api string, err error)
}

// TokenCounter is a Handler that can count a call's prompt tokens, for
// POST /v1/messages/count_tokens.
type TokenCounter interface {
	CountTokens(ctx context.Context, c *Call) (int, error)
}

// Error is an answer with a status and an error type of the API's (the
// Anthropic type names; the OpenAI ones are derived).
type Error struct {
	Status  int
	Type    string // invalid_request_error, authentication_error, not_found_error, rate_limit_error, api_error, overloaded_error
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("gateway: %d %s: %s", e.Status, e.Type, e.Message) }

// ErrUntranslatable is wrapped by the errors of requests the gateway
// cannot translate into the canonical conversation.
var ErrUntranslatable = errors.New("gateway: cannot translate")

// ErrNoRoute is wrapped by the error Handler.Refused is told of for a
// request to a path the gateway does not answer (the harness got a 404).
var ErrNoRoute = errors.New("gateway: no such route")

// noRoute wraps an answer so that errors.Is finds ErrNoRoute.
type noRoute struct{ e *Error }

func (r noRoute) Error() string   { return r.e.Error() }
func (r noRoute) Unwrap() []error { return []error{r.e, ErrNoRoute} }

// untranslatable is a 400 for what cannot be translated.
func untranslatable(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
		Message: fmt.Sprintf("forkline gateway: "+format, args...)}
}

// refusal wraps an answer so that errors.Is finds ErrUntranslatable.
type refusal struct{ e *Error }

func (r refusal) Error() string   { return r.e.Error() }
func (r refusal) Unwrap() []error { return []error{r.e, ErrUntranslatable} }

// encodeString is s as a JSON string without HTML escaping.
func encodeString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// marshal is v as JSON without HTML escaping (tool output holds < > &).
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("gateway: encoding %T: %v", v, err)) // only our own types are encoded
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// compactJSON is raw compacted, or raw when it is not JSON.
func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// argumentsObject is a call's arguments as a JSON object for the APIs that
// carry an object (Anthropic's tool_use input): the text itself when it is
// one, else {} (the record keeps the model's text).
func argumentsObject(text string) json.RawMessage {
	t := bytes.TrimSpace([]byte(text))
	if len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return t
	}
	return json.RawMessage(`{}`)
}
