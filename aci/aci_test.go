package aci

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/runtime"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestEveryFieldIsDescribed(t *testing.T) {
	for _, k := range runtime.ActionKinds() {
		assert.NotEmpty(t, descriptions[k], "kind %s has no description", k)
		names, _, ok := runtime.ActionFieldNames(k)
		require.True(t, ok)
		for _, n := range names {
			_, ok := fields[n]
			assert.True(t, ok, "field %s of %s has no JSON type here; add it to fields", n, k)
		}
	}
}

// A tool call filled from the schema alone must be a valid canonical action:
// the schema's names, types, required fields and enums match runtime's.
func TestToolCallsFromSchemasAreCanonicalActions(t *testing.T) {
	tools := ToolSchemas()
	require.Len(t, tools, len(runtime.ActionKinds()))
	for i, k := range runtime.ActionKinds() {
		fn := tools[i]["function"].(map[string]any)
		require.Equal(t, string(k), fn["name"])
		params := fn["parameters"].(map[string]any)
		props := params["properties"].(map[string]any)
		names, required, _ := runtime.ActionFieldNames(k)
		require.Len(t, props, len(names), "kind %s", k)
		var req []string
		for j, n := range names {
			if required[j] {
				req = append(req, n)
			}
		}
		var got []string
		for _, r := range params["required"].([]any) {
			got = append(got, r.(string))
		}
		assert.Equal(t, req, got, "kind %s required", k)

		args := map[string]any{"kind": string(k)}
		for name, p := range props {
			p := p.(map[string]any)
			switch {
			case p["enum"] != nil:
				args[name] = p["enum"].([]any)[0]
			case p["type"] == "integer":
				args[name] = 7
			case p["type"] == "string":
				args[name] = "some text"
			default:
				t.Fatalf("kind %s field %s: type %v", k, name, p["type"])
			}
		}
		raw, err := json.Marshal(args)
		require.NoError(t, err)
		var a runtime.Action
		require.NoError(t, json.Unmarshal(raw, &a), "kind %s: %s", k, raw)
		assert.Equal(t, k, a.Kind)
	}
}

func TestToolSchemasAreFreshCopies(t *testing.T) {
	a := ToolSchemas()
	a[0]["function"].(map[string]any)["name"] = "changed"
	b := ToolSchemas()
	assert.NotEqual(t, "changed", b[0]["function"].(map[string]any)["name"])
}

func TestToolSchemasGolden(t *testing.T) {
	got, err := json.MarshalIndent(ToolSchemas(), "", "  ")
	require.NoError(t, err)
	got = append(got, '\n')
	path := filepath.Join("testdata", "tools.golden.json")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./aci -update to create it")
	assert.Equal(t, string(want), string(got))
}

func TestObservationText(t *testing.T) {
	exec := runtime.Action{Kind: runtime.ActExec, Cmd: "x"}
	read := runtime.Action{Kind: runtime.ActReadFile, Path: "f"}
	for _, tc := range []struct {
		name  string
		step  runtime.Step
		limit int
		want  string
	}{
		{"exec without output", runtime.Step{Action: exec}, 0, "exit code: 0\n(no output)"},
		{"failing exec", runtime.Step{Action: exec, Observation: runtime.Observation{Output: []byte("boom\n"), ExitCode: 2, Error: true, ErrorKind: runtime.ErrExitStatus}}, 0,
			"exit code: 2\nboom\n"},
		{"timeout", runtime.Step{Action: exec, Observation: runtime.Observation{Output: []byte("part"), ExitCode: -1, Error: true, ErrorKind: runtime.ErrTimeout, TimedOut: true}}, 0,
			"exit code: -1\n[forkline: the action timed out and was killed]\npart"},
		{"missing file", runtime.Step{Action: read, Observation: runtime.Observation{ExitCode: -1, Error: true, ErrorKind: runtime.ErrNotFound}}, 0,
			"error: not_found\n"},
		{"screenshot", runtime.Step{Action: runtime.Action{Kind: runtime.ActScreenshot}, Observation: runtime.Observation{ExitCode: -1, Screenshot: &runtime.Screenshot{Width: 3, Height: 2}}}, 0,
			"[forkline: a 3x2 screenshot was taken; this policy sends text only]\n"},
		{"invalid UTF-8", runtime.Step{Action: read, Observation: runtime.Observation{Output: []byte("a\xffb")}}, 0, "a\uFFFDb"},
		{"elided", runtime.Step{Action: read, Observation: runtime.Observation{Output: []byte("0123456789abcdefghij")}}, 10,
			"01234\n[... forkline: 10 bytes elided from the middle of this output ...]\nfghij"},
		{"at the limit", runtime.Step{Action: exec, Observation: runtime.Observation{Output: []byte("é123456789")}}, 11, "exit code: 0\né123456789"},
		// The limit applies to the text after the replacement.
		{"invalid UTF-8 over the limit once replaced", runtime.Step{Action: read, Observation: runtime.Observation{Output: []byte("a\xffb\xffc")}}, 6,
			"a\n[... forkline: 7 bytes elided from the middle of this output ...]\nc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ObservationText(tc.step, tc.limit))
		})
	}
}

func TestElideKeepsRunes(t *testing.T) {
	s := "ééééé" // 10 bytes
	got := Elide(s, 5)
	require.True(t, utf8.ValidString(got), got)
	assert.True(t, strings.HasPrefix(got, "é"))
	assert.True(t, strings.HasSuffix(got, "é"))
	assert.Equal(t, s, Elide(s, 10))
}

// The tools' JSON is written in the one documented key order: type, then
// function{name, description, parameters{type, properties, required,
// additionalProperties}}, each property's type, description and enum, and
// the properties in the action's canonical field order — not sorted, as a
// Go map would write them.
func TestToolsJSONKeyOrder(t *testing.T) {
	raw, err := ToolsJSON([]runtime.ActionKind{runtime.ActClick, runtime.ActWriteFile})
	require.NoError(t, err)
	want := `[{"type":"function","function":{"name":"click","description":"Click at a screen position.",` +
		`"parameters":{"type":"object","properties":{` +
		`"x":{"type":"integer","description":"Horizontal pixel coordinate, in the screenshot's coordinate space."},` +
		`"y":{"type":"integer","description":"Vertical pixel coordinate, in the screenshot's coordinate space."},` +
		`"button":{"type":"string","description":"Mouse button; left when absent.","enum":["left","middle","right"]}},` +
		`"required":["x","y"],"additionalProperties":false}}},` +
		`{"type":"function","function":{"name":"write_file","description":"Create or overwrite a file with the given content.",` +
		`"parameters":{"type":"object","properties":{` +
		`"path":{"type":"string","description":"File path, relative to the workspace."},` +
		`"content":{"type":"string","description":"Full new content of the file."}},` +
		`"required":["path"],"additionalProperties":false}}}]`
	require.Equal(t, want, string(raw))

	// Every kind: properties in runtime's canonical order, the same content
	// as the map form.
	for _, k := range runtime.ActionKinds() {
		tools, err := Tools([]runtime.ActionKind{k})
		require.NoError(t, err)
		names, _, _ := runtime.ActionFieldNames(k)
		var got []string
		for _, p := range tools[0].Function.Parameters.Properties {
			got = append(got, p.Name)
		}
		assert.Equal(t, names, got, "kind %s", k)
		b, err := json.Marshal(tools[0])
		require.NoError(t, err)
		var fromOrdered, fromMap any
		require.NoError(t, json.Unmarshal(b, &fromOrdered))
		mb, _ := json.Marshal(ToolSchema(k))
		require.NoError(t, json.Unmarshal(mb, &fromMap))
		assert.Equal(t, fromMap, fromOrdered, "kind %s: the ordered form holds what the map form does", k)

		// A decoded tool keeps its order and re-encodes to the same bytes.
		var back Tool
		require.NoError(t, json.Unmarshal(b, &back))
		again, _ := json.Marshal(back)
		assert.Equal(t, string(b), string(again))
	}
	_, err = Tools([]runtime.ActionKind{"teleport"})
	require.ErrorContains(t, err, `unknown action kind "teleport"`)
}

func TestExecToolSaysTheShellMode(t *testing.T) {
	fresh, err := ToolsFor([]runtime.ActionKind{runtime.ActExec}, "")
	require.NoError(t, err)
	persistent, err := ToolsFor([]runtime.ActionKind{runtime.ActExec}, ShellPersistent)
	require.NoError(t, err)
	assert.NotContains(t, fresh[0].Function.Description, "persistent")
	assert.Contains(t, persistent[0].Function.Description, "persistent shell")
	assert.Contains(t, persistent[0].Function.Description, "working directory")
	old, err := Tools([]runtime.ActionKind{runtime.ActExec})
	require.NoError(t, err)
	assert.Equal(t, fresh, old, "the fresh description is the one datasets were offered before")
}

// On a provider whose forks go on with the shell (gvisor), exec says so;
// elsewhere the persistent description is what it was, byte for byte.
func TestExecToolSaysForksGoOnWithTheShell(t *testing.T) {
	assert.Equal(t, ShellPersistent, ExecShell(ShellPersistent, false))
	assert.Equal(t, "", ExecShell("", true), "a fresh shell has nothing to go on")
	require.Equal(t, ShellPersistentForked, ExecShell(ShellPersistent, true))
	persistent, err := ToolsFor([]runtime.ActionKind{runtime.ActExec}, ExecShell(ShellPersistent, false))
	require.NoError(t, err)
	forked, err := ToolsFor([]runtime.ActionKind{runtime.ActExec}, ExecShell(ShellPersistent, true))
	require.NoError(t, err)
	assert.Equal(t, "Run a shell command in this episode's persistent shell and return its output and exit code. The shell keeps its state from one command to the next: the working directory (cd), environment variables (export), functions, aliases and background jobs carry over; exit ends the shell, and the next command starts a new one in the workspace.",
		persistent[0].Function.Description, "local's and docker's description is unchanged")
	assert.True(t, strings.HasPrefix(forked[0].Function.Description, persistent[0].Function.Description), "the forked description says the shell persists")
	assert.Contains(t, forked[0].Function.Description, "forked with its processes")
	assert.Contains(t, forked[0].Function.Description, "setup")
}

// The offered tools are encoded once per list and shell and shared: each
// answer is the encoding of its own list, whatever was asked before, and
// two callers appending to what they got do not write into each other's.
func TestOfferedToolsJSONForIsPerListAndShell(t *testing.T) {
	kinds := []runtime.ActionKind{runtime.ActExec, runtime.ActDone}
	for range 2 {
		for _, shell := range []string{"", ShellPersistent, ShellPersistentForked, "fresh"} {
			want, err := ToolsJSONFor(kinds, shell)
			require.NoError(t, err)
			got := OfferedToolsJSONFor(kinds, shell)
			require.Equal(t, string(want), string(got), "shell %q", shell)
		}
	}
	a := append(OfferedToolsJSONFor(kinds, ""), 'A')
	b := append(OfferedToolsJSONFor(kinds, ""), 'B')
	require.Equal(t, byte('A'), a[len(a)-1], "the second caller's append wrote into the first's")
	require.Equal(t, byte('B'), b[len(b)-1])
	require.NotEqual(t, string(OfferedToolsJSONFor(kinds, "")), string(OfferedToolsJSONFor(kinds, ShellPersistent)))
	require.NotEqual(t, string(OfferedToolsJSONFor(kinds, "")), string(OfferedToolsJSONFor(kinds[:1], "")))
	all, err := ToolsJSONFor(runtime.ActionKinds(), "")
	require.NoError(t, err)
	require.Equal(t, string(all), string(OfferedToolsJSONFor(nil, "")), "no kinds: every canonical action")
}
