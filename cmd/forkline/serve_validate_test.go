package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/serve/openenvtest"
)

// validatorCriterion is one criterion of OpenEnv's validation report
// (_make_criterion: id, passed; required is always true there).
type validatorCriterion struct {
	ID     string
	Passed bool
	Actual any
}

// validatorReport is the part of validate_running_environment's report the
// test reads.
type validatorReport struct {
	Target, StandardVersion, StandardProfile, Mode string
	Passed                                         bool
	Criteria                                       []validatorCriterion
}

// openenvValidate makes exactly the checks of OpenEnv's `openenv validate
// --url` against a running server, in its order, with its conditions
// (huggingface/OpenEnv, src/openenv/cli/_validation.py,
// validate_running_environment; the URL as _normalize_runtime_url makes it,
// the profile as _runtime_standard_profile names it). requests' json=
// bodies are sent with Content-Type application/json; the timeout is its
// default 5 s (with slack for a loaded machine here).
func openenvValidate(t *testing.T, baseURL string) validatorReport {
	t.Helper()
	target := strings.TrimSpace(baseURL)
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	require.NoError(t, err)
	require.NotEmpty(t, u.Host)
	target = strings.TrimRight(target, "/")
	hc := &http.Client{Timeout: 30 * time.Second}
	rep := validatorReport{Target: target, StandardVersion: "unknown", Mode: "unknown"}
	// get is requests.get/post and response.json(): the status and the
	// decoded body (nil when it is not JSON, as json() raises ValueError).
	get := func(method, path string, body []byte) (int, any) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequest(method, target+path, rd)
		require.NoError(t, err)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil // requests.RequestException: the criterion fails
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return resp.StatusCode, nil
		}
		return resp.StatusCode, v
	}
	add := func(id string, passed bool, actual any) {
		rep.Criteria = append(rep.Criteria, validatorCriterion{ID: id, Passed: passed, Actual: actual})
	}

	// Criterion openapi_version_available: GET /openapi.json, 200, a dict
	// whose info is a dict with a str version; paths read from it.
	var paths map[string]any
	status, body := get("GET", "/openapi.json", nil)
	doc, _ := body.(map[string]any)
	info, _ := doc["info"].(map[string]any)
	version, isStr := info["version"].(string)
	if ok := status == 200 && doc != nil && info != nil && isStr; ok {
		rep.StandardVersion = version
		paths, _ = doc["paths"].(map[string]any) // openapi_json.get("paths", {})
		add("openapi_version_available", true, version)
	} else {
		add("openapi_version_available", false, status)
	}
	// _runtime_standard_profile.
	rep.StandardProfile = "openenv-http/unknown"
	if strings.HasPrefix(rep.StandardVersion, "1.") {
		rep.StandardProfile = "openenv-http/1.x"
	}

	// health_endpoint: GET /health, 200, status "healthy".
	status, body = get("GET", "/health", nil)
	h, _ := body.(map[string]any)
	add("health_endpoint", status == 200 && h != nil && h["status"] == "healthy", h)

	// metadata_endpoint: GET /metadata, 200, name and description str.
	status, body = get("GET", "/metadata", nil)
	m, _ := body.(map[string]any)
	_, nameOK := m["name"].(string)
	_, descOK := m["description"].(string)
	add("metadata_endpoint", status == 200 && m != nil && nameOK && descOK, m["name"])

	// schema_endpoint: GET /schema, 200, action, observation and state
	// dicts.
	status, body = get("GET", "/schema", nil)
	s, _ := body.(map[string]any)
	_, a := s["action"].(map[string]any)
	_, o := s["observation"].(map[string]any)
	_, st := s["state"].(map[string]any)
	add("schema_endpoint", status == 200 && s != nil && a && o && st, status)

	// mcp_endpoint: POST /mcp with json={}, 200, a dict whose jsonrpc is
	// "2.0".
	status, body = get("POST", "/mcp", []byte("{}"))
	mc, _ := body.(map[string]any)
	add("mcp_endpoint", status == 200 && mc != nil && mc["jsonrpc"] == "2.0", mc)

	// mode_endpoint_consistency: from the OpenAPI paths, /reset means
	// simulation mode, which needs /step and /state too; without /reset,
	// production mode, which must have neither.
	if len(paths) > 0 {
		_, hasReset := paths["/reset"]
		_, hasStep := paths["/step"]
		_, hasState := paths["/state"]
		if hasReset {
			rep.Mode = "simulation"
			add("mode_endpoint_consistency", hasStep && hasState, []bool{hasReset, hasStep, hasState})
		} else {
			rep.Mode = "production"
			add("mode_endpoint_consistency", !hasStep && !hasState, []bool{hasReset, hasStep, hasState})
		}
	} else {
		add("mode_endpoint_consistency", false, "Cannot determine mode without OpenAPI paths")
	}

	rep.Passed = true
	for _, c := range rep.Criteria {
		rep.Passed = rep.Passed && c.Passed
	}
	return rep
}

// OpenEnv's validator, as its source has it, passes the real forkline
// serve: every criterion, simulation mode, the openenv-http/1.x profile.
// Then OpenEnv's MCPToolClient (production mode) drives one episode of the
// example task over the binary's /mcp.
func TestServePassesOpenEnvsValidator(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the server binary")
	}
	_, base := startServe(t, "-tasks", "../../examples/tasks/fix-sum.yaml", "-workdir", t.TempDir())
	rep := openenvValidate(t, strings.TrimPrefix(base, "http://")) // the URL as a user types it
	var ids []string
	for _, c := range rep.Criteria {
		ids = append(ids, c.ID)
		require.True(t, c.Passed, "criterion %s failed: %v", c.ID, c.Actual)
	}
	require.Equal(t, []string{"openapi_version_available", "health_endpoint", "metadata_endpoint", "schema_endpoint", "mcp_endpoint",
		"mode_endpoint_consistency"}, ids)
	require.True(t, rep.Passed)
	require.Equal(t, "simulation", rep.Mode)
	require.Equal(t, "openenv-http/1.x", rep.StandardProfile)

	mcp := openenvtest.NewMCPClient(base)
	tools, err := mcp.ListTools()
	require.NoError(t, err)
	require.Len(t, tools, 4)
	out, err := mcp.CallTool("exec", map[string]any{"cmd": "sh sum.sh 4"})
	require.NoError(t, err)
	require.Equal(t, "6\n", out.(map[string]any)["structuredContent"].(map[string]any)["observation"].(map[string]any)["output"], "1+2+3: off by one")
	out, err = mcp.CallTool("done", nil)
	require.NoError(t, err)
	res := out.(map[string]any)["structuredContent"].(map[string]any)
	require.Equal(t, true, res["done"])
	require.Equal(t, 0.0, res["reward"], "unfixed: the hidden tests fail")
	require.NoError(t, mcp.Close())
}
