// Package aci describes forkline's agent-computer interface to models: the
// canonical actions of package runtime as OpenAI-style function tools, one
// tool per action kind whose parameters are the action's fields, and the
// text a model is shown of an observation (ObservationText).
//
// The shapes come from runtime (ActionKinds, ActionFieldNames); this package
// adds only what runtime leaves to its consumers: each field's JSON type, a
// description a model can read, and the observation's rendering. Policies
// use it to offer tools and show results, exporters to write the tools and
// tool messages a trajectory was recorded with, so training data reads as
// the policy's conversations do. Tools are written in one fixed key order
// (ToolKeyOrder, the Tool type), the same for policies and exporters, since
// chat templates render tools in the order they receive them. It imports
// runtime and the standard library only.
package aci

import (
	"encoding/json"
	"fmt"

	"github.com/forkline/forkline/runtime"
)

// field is the JSON Schema of one action field.
type field struct {
	typ  string   // JSON Schema type: "string" or "integer"
	desc string   // what the model should put there
	enum []string // allowed values, when the field is an enumeration
}

// fields describes every action field by its JSON name. A field runtime adds
// without an entry here is offered as a plain string (and a test fails).
var fields = map[string]field{
	"cmd":        {typ: "string", desc: "Shell command to run in the workspace, e.g. \"ls -la\"."},
	"timeout_ms": {typ: "integer", desc: "Timeout in milliseconds; 0 or absent uses the session default."},
	"path":       {typ: "string", desc: "File path, relative to the workspace."},
	"content":    {typ: "string", desc: "Full new content of the file."},
	"x":          {typ: "integer", desc: "Horizontal pixel coordinate, in the screenshot's coordinate space."},
	"y":          {typ: "integer", desc: "Vertical pixel coordinate, in the screenshot's coordinate space."},
	"button":     {typ: "string", desc: "Mouse button; left when absent.", enum: []string{"left", "middle", "right"}},
	"text":       {typ: "string", desc: "Text to type."},
	"keys":       {typ: "string", desc: "Key or chord to press, e.g. \"Enter\" or \"Control+a\"."},
	"dx":         {typ: "integer", desc: "Horizontal scroll amount in pixels."},
	"dy":         {typ: "integer", desc: "Vertical scroll amount in pixels."},
	"url":        {typ: "string", desc: "URL to open."},
	"ms":         {typ: "integer", desc: "How long to wait, in milliseconds."},
	"answer":     {typ: "string", desc: "The final answer or a short summary of what was done."},
	"scrollback": {typ: "integer", desc: "Lines of scrollback above the visible screen to include; 0 or absent for the screen only."},
}

// persistentExec is exec's description in a task whose shell persists.
const persistentExec = "Run a shell command in this episode's persistent shell and return its output and exit code. The shell keeps its state from one command to the next: the working directory (cd), environment variables (export), functions, aliases and background jobs carry over; exit ends the shell, and the next command starts a new one in the workspace."

// forkedExec is exec's description in a task whose shell persists on a
// provider whose forks go on with the shell (ShellPersistentForked).
const forkedExec = persistentExec + " The shell is the one the task's setup ran in, and this episode's sandbox was forked with its processes: the shell goes on from where it was, so the directory, variables, functions and background jobs that setup (and, in a branch, the steps before it) left are already there."

// descriptions says what each action kind does.
var descriptions = map[runtime.ActionKind]string{
	runtime.ActExec:       "Run a shell command in the workspace and return its output and exit code.",
	runtime.ActReadFile:   "Read a file and return its content.",
	runtime.ActWriteFile:  "Create or overwrite a file with the given content.",
	runtime.ActScreenshot: "Take a screenshot of the screen.",
	runtime.ActClick:      "Click at a screen position.",
	runtime.ActType:       "Type text into the focused element.",
	runtime.ActKey:        "Press a key or key chord.",
	runtime.ActScroll:     "Scroll the view.",
	runtime.ActNavigate:   "Open a URL in the browser.",
	runtime.ActWait:       "Wait before the next action.",
	runtime.ActDone:       "Finish the task, with the answer when one is asked for.",
	runtime.ActSendKeys:   "Send keystrokes to the terminal (a program such as a REPL, an editor or a prompt running in it). keys is one tmux key name (e.g. \"Enter\", \"C-c\", \"Escape\", \"Up\", \"Tab\", \"F1\", \"M-x\") or else text typed as is, where a newline is Enter. The terminal is its own shell in the workspace, apart from exec's.",
	runtime.ActReadScreen: "Return the terminal's visible text once its output has settled, optionally with scrollback lines above it.",
}

// ToolSchemas returns one OpenAI function-tool object per canonical action
// kind, in runtime.ActionKinds order (sorted by name), as generic maps: the
// content of Tools, for code that inspects or edits schemas. A map loses
// key order (encoding/json sorts it), so what is sent to a model or
// written for a chat template to render is ToolsJSON's encoding, never a
// map's (see ToolKeyOrder).
//
// The tool name is the action kind and the parameters are exactly the
// action's fields, so a tool call {"name": K, "arguments": A} is the canonical
// action {"kind": K, ...A}. "required" is always present (possibly empty).
// Every call builds fresh maps: callers may change what they get.
func ToolSchemas() []map[string]any {
	kinds := runtime.ActionKinds()
	out := make([]map[string]any, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, ToolSchema(k))
	}
	return out
}

// ToolSchema returns the function-tool object of one action kind as a map
// (see ToolSchemas). It panics for a kind runtime does not know.
func ToolSchema(kind runtime.ActionKind) map[string]any {
	t, ok := tool(kind)
	if !ok {
		panic(fmt.Sprintf("aci: unknown action kind %q", kind))
	}
	b, err := json.Marshal(t)
	if err != nil {
		panic(fmt.Sprintf("aci: encoding the %s tool: %v", kind, err))
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(fmt.Sprintf("aci: decoding the %s tool: %v", kind, err))
	}
	return m
}

// FieldType returns the JSON Schema type of an action field ("string" or
// "integer"), and false for a field this package has no entry for.
func FieldType(name string) (string, bool) {
	f, ok := fields[name]
	return f.typ, ok
}
