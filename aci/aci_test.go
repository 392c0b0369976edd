package aci

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

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
