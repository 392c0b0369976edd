package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/runtime"
)

func TestParseTextDialects(t *testing.T) {
	exec := runtime.Action{Kind: runtime.ActExec, Cmd: "ls -la"}
	done := runtime.Action{Kind: runtime.ActDone, Answer: "42"}
	cases := []struct {
		name string
		text string
		want []runtime.Action // nil: no call
		err  string           // non-empty: ErrUnparsed containing this
	}{
		{"hermes block", "Let me look.\n<tool_call>\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls -la\"}}\n</tool_call>", []runtime.Action{exec}, ""},
		{"two blocks", `<tool_call>{"name":"exec","arguments":{"cmd":"ls -la"}}</tool_call><tool_call>{"name":"done","arguments":{"answer":"42"}}</tool_call>`, []runtime.Action{exec, done}, ""},
		{"block left open at a stop string", `<tool_call>{"name":"exec","arguments":{"cmd":"ls -la"}}`, []runtime.Action{exec}, ""},
		{"arguments as a JSON string", `<tool_call>{"name":"exec","arguments":"{\"cmd\":\"ls -la\"}"}</tool_call>`, []runtime.Action{exec}, ""},
		{"parameters alias", `<tool_call>{"name":"exec","parameters":{"cmd":"ls -la"}}</tool_call>`, []runtime.Action{exec}, ""},
		{"openai wrapper", `<tool_call>{"type":"function","function":{"name":"exec","arguments":{"cmd":"ls -la"}}}</tool_call>`, []runtime.Action{exec}, ""},
		{"canonical action in a block", `<tool_call>{"kind":"exec","cmd":"ls -la"}</tool_call>`, []runtime.Action{exec}, ""},
		{"fenced json", "I will list files.\n```json\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls -la\"}}\n```\n", []runtime.Action{exec}, ""},
		{"fenced untagged canonical", "```\n{\"kind\": \"done\", \"answer\": \"42\"}\n```", []runtime.Action{done}, ""},
		{"bare object", ` {"name": "done", "arguments": {"answer": "42"}} `, []runtime.Action{done}, ""},
		{"prose", "I think the answer is 42.", nil, ""},
		{"fenced shell is not a call", "```sh\nls -la\n```", nil, ""},
		{"fenced data is not a call", "```json\n{\"port\": 8080}\n```", nil, ""},
		{"fenced broken data is not a call", "```json\n{\"port\": 8080,\n```", nil, ""},
		{"broken block", `<tool_call>{"name":"exec","arguments":{"cmd":"ls"</tool_call>`, nil, "block 1"},
		{"block without a name", `<tool_call>{"cmd":"ls"}</tool_call>`, nil, `no "name" or "kind"`},
		{"fenced broken call", "```json\n{\"name\": \"exec\", \"arguments\": {\"cmd\": \"ls\"\n```", nil, "fenced block 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls, err := ParseText(c.text)
			if c.err != "" {
				require.ErrorIs(t, err, ErrUnparsed)
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			var got []runtime.Action
			for _, call := range calls {
				a, err := call.Action(nil)
				require.NoError(t, err)
				got = append(got, a)
			}
			require.Equal(t, c.want, got)
		})
	}
}

func TestCallAction(t *testing.T) {
	offered := map[runtime.ActionKind]bool{runtime.ActExec: true, runtime.ActDone: true, runtime.ActClick: true}
	cases := []struct {
		name, tool, args string
		want             runtime.Action
		err              string
	}{
		{"string arguments", "exec", `"{\"cmd\":\"make\",\"timeout_ms\":5000}"`, runtime.Action{Kind: runtime.ActExec, Cmd: "make", TimeoutMS: 5000}, ""},
		{"object arguments", "exec", `{"cmd":"make"}`, runtime.Action{Kind: runtime.ActExec, Cmd: "make"}, ""},
		{"integral float and numeric string", "click", `{"x":10.0,"y":"20"}`, runtime.Action{Kind: runtime.ActClick, X: 10, Y: 20}, ""},
		{"no arguments", "done", ``, runtime.Action{Kind: runtime.ActDone}, ""},
		{"null arguments", "done", `null`, runtime.Action{Kind: runtime.ActDone}, ""},
		{"fractional integer", "click", `{"x":10.5,"y":1}`, runtime.Action{}, `field "x"`},
		{"unknown tool", "rm_rf", `{}`, runtime.Action{}, `unknown tool "rm_rf" (tools: click, done, exec)`},
		{"tool not offered", "read_file", `{"path":"a"}`, runtime.Action{}, `unknown tool "read_file"`},
		{"missing field", "exec", `{}`, runtime.Action{}, `needs field "cmd"`},
		{"extra field", "exec", `{"cmd":"ls","shell":"bash"}`, runtime.Action{}, `has no field "shell"`},
		{"other kind", "exec", `{"kind":"done","cmd":"ls"}`, runtime.Action{}, "name another kind"},
		{"not an object", "exec", `[1]`, runtime.Action{}, "not a JSON object"},
		{"bad enum", "click", `{"x":1,"y":1,"button":"thumb"}`, runtime.Action{}, "thumb"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := Call{Name: c.tool, Arguments: json.RawMessage(c.args)}.Action(offered)
			if c.err != "" {
				require.ErrorIs(t, err, ErrUnparsed)
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, a)
		})
	}
}

// Every offered tool's name is an action kind and a call filled from its
// required fields decodes: the schemas the model sees and the parser agree.
func TestToolsMatchTheParser(t *testing.T) {
	tools, err := Tools(runtime.ActionKinds(), "")
	require.NoError(t, err)
	require.Len(t, tools, len(runtime.ActionKinds()))
	samples := map[string]any{"string": "a", "integer": 1}
	for i, k := range runtime.ActionKinds() {
		fn := tools[i].Function
		require.Equal(t, string(k), fn.Name)
		props := map[string]aci.Property{}
		for _, p := range fn.Parameters.Properties {
			props[p.Name] = p
		}
		args := map[string]any{}
		for _, r := range fn.Parameters.Required {
			p := props[r]
			v := samples[p.Type]
			if len(p.Enum) > 0 {
				v = p.Enum[0]
			}
			args[r] = v
		}
		b, _ := json.Marshal(args)
		a, err := Call{Name: string(k), Arguments: b}.Action(nil)
		require.NoError(t, err, "%s %s", k, b)
		require.Equal(t, k, a.Kind)
	}
	_, err = Tools([]runtime.ActionKind{"teleport"}, "")
	require.Error(t, err)
}

func TestTextCallRoundTrips(t *testing.T) {
	a := runtime.Action{Kind: runtime.ActWriteFile, Path: "a.txt", Content: "x\n</tool_call>"}
	calls, err := ParseText(textCall(a))
	require.NoError(t, err)
	require.Len(t, calls, 1)
	got, err := calls[0].Action(nil)
	require.NoError(t, err)
	require.Equal(t, a, got)
	require.True(t, strings.HasPrefix(textCall(a), "<tool_call>"))
}
