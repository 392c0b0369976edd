package serve_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/serve"
	"github.com/forkline/forkline/serve/openenvtest"
)

// openAPIDoc fetches /openapi.json and compiles its component schemas with
// an independent JSON Schema validator: every $ref in them resolves inside
// the document.
type openAPIDoc struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
}

func fetchOpenAPI(t *testing.T, base string) openAPIDoc {
	t.Helper()
	status, raw, err := openenvtest.HTTPRaw("GET", base+"/openapi.json", nil)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	require.NoError(t, c.AddResource("mem://openapi.json", doc))
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return openAPIDoc{doc: m, compiler: c}
}

// schema compiles the schema at a JSON pointer of the document.
func (d openAPIDoc) schema(t *testing.T, pointer string) *jsonschema.Schema {
	t.Helper()
	s, err := d.compiler.Compile("mem://openapi.json#" + pointer)
	require.NoError(t, err, "the schema at %s does not compile (a $ref that does not resolve?)", pointer)
	return s
}

// validate checks an answer's bytes against the schema at pointer.
func (d openAPIDoc) validate(t *testing.T, pointer string, raw []byte) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
	require.NoError(t, err)
	require.NoError(t, d.schema(t, pointer).Validate(v), "%s: %s", pointer, raw)
}

func responseSchema(path, method, status string) string {
	return "/paths/" + strings.ReplaceAll(path, "/", "~1") + "/" + method + "/responses/" + status + "/content/application~1json/schema"
}

// GET /openapi.json is an OpenAPI 3.1 document of exactly the routes the
// server answers, whose component schemas Action, Observation and State
// are /schema's own; the real answers of every route validate against
// the schemas the document gives them.
func TestOpenAPIDescribesTheRoutesServed(t *testing.T) {
	ts := startServer(t, serve.Config{})
	d := fetchOpenAPI(t, ts.base)
	require.Equal(t, "3.1.0", d.doc["openapi"])
	info := d.doc["info"].(map[string]any)
	require.Equal(t, serve.OpenAPIVersion, info["version"])

	paths := d.doc["paths"].(map[string]any)
	var documented []string
	for p, item := range paths {
		for m := range item.(map[string]any) {
			documented = append(documented, strings.ToUpper(m)+" "+p)
		}
	}
	sort.Strings(documented)
	require.Equal(t, []string{"GET /extensions", "GET /health", "GET /metadata", "GET /openapi.json", "GET /schema", "GET /state",
		"GET /tasks", "GET /ws", "POST /mcp", "POST /reset", "POST /step"}, documented)
	for _, route := range documented {
		method, path, _ := strings.Cut(route, " ")
		var body any
		if method == "POST" {
			body = map[string]any{}
		}
		status, _, err := openenvtest.HTTPRaw(method, ts.base+path, body)
		require.NoError(t, err)
		require.NotContains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, status, "%s is documented but not served", route)
	}
	status, _, err := openenvtest.HTTPRaw("GET", ts.base+"/docs", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, status, "an undocumented path is not served")

	// The components are /schema's schemas, with their $defs beside them.
	_, wire, err := openenvtest.HTTPJSON("GET", ts.base+"/schema", nil)
	require.NoError(t, err)
	comps := d.doc["components"].(map[string]any)["schemas"].(map[string]any)
	for name, key := range map[string]string{"Observation": "observation", "State": "state"} {
		w := wire[key].(map[string]any)
		delete(w, "$schema")
		require.Equal(t, w, comps[name], "component %s is /schema's %s", name, key)
	}
	action := wire["action"].(map[string]any)
	require.Equal(t, action["$defs"].(map[string]any)["ActionMetadata"], comps["ActionMetadata"])
	require.Len(t, comps["Action"].(map[string]any)["oneOf"], len(action["oneOf"].([]any)))
	d.schema(t, "/components/schemas/Action")

	// Real answers against the document's schemas.
	for _, get := range []string{"/health", "/metadata", "/schema", "/state", "/tasks", "/extensions"} {
		status, raw, err := openenvtest.HTTPRaw("GET", ts.base+get, nil)
		require.NoError(t, err)
		require.Equal(t, 200, status, get)
		d.validate(t, responseSchema(get, "get", "200"), raw)
	}
	status, raw, err := openenvtest.HTTPRaw("POST", ts.base+"/reset", map[string]any{"task_id": "fix-sum"})
	require.NoError(t, err)
	require.Equal(t, 200, status)
	d.validate(t, responseSchema("/reset", "post", "200"), raw)
	step := map[string]any{"task_id": "fix-sum", "action": map[string]any{"kind": "done", "answer": "nothing"}}
	d.validate(t, "/paths/~1step/post/requestBody/content/application~1json/schema", mustJSON(t, step))
	status, raw, err = openenvtest.HTTPRaw("POST", ts.base+"/step", step)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	d.validate(t, responseSchema("/step", "post", "200"), raw)
	status, raw, err = openenvtest.HTTPRaw("POST", ts.base+"/step", map[string]any{"action": map[string]any{"kind": "exec"}})
	require.NoError(t, err)
	require.Equal(t, 422, status)
	d.validate(t, responseSchema("/step", "post", "422"), raw)
	status, raw, err = openenvtest.HTTPRaw("POST", ts.base+"/mcp", map[string]any{"jsonrpc": "2.0", "method": "ping", "id": 1})
	require.NoError(t, err)
	require.Equal(t, 200, status)
	d.validate(t, responseSchema("/mcp", "post", "200"), raw)
	bad := map[string]any{"action": map[string]any{"kind": "exec"}, "seed": -1}
	require.Error(t, d.schema(t, "/components/schemas/StepRequest").Validate(jsonValue(t, bad)), "the document refuses what the server refuses")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func jsonValue(t *testing.T, v any) any {
	t.Helper()
	out, err := jsonschema.UnmarshalJSON(strings.NewReader(string(mustJSON(t, v))))
	require.NoError(t, err)
	return out
}
