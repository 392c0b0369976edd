package openai_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/runtime"
)

func checker(t *testing.T, params map[string]string) policy.Checker {
	t.Helper()
	src, err := openai.Open(policy.Options{Params: params})
	require.NoError(t, err)
	c, ok := src.(policy.Checker)
	require.True(t, ok, "the openai policy checks its server before a run")
	return c
}

// Before a run: the server answers /v1/models and serves the model named,
// checked against a server that answers as vLLM does.
func TestCheckAgainstVLLM(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{Model: "Qwen/Qwen3-8B"})
	require.NoError(t, checker(t, map[string]string{"base_url": s.URL + "/v1", "model": "Qwen/Qwen3-8B"}).Check(t.Context()))
	require.NoError(t, checker(t, map[string]string{"base_url": s.URL + "/v1"}).Check(t.Context()), "no model named: any server that answers")
	err := checker(t, map[string]string{"base_url": s.URL + "/v1", "model": "Qwen/Qwen3-32B"}).Check(t.Context())
	require.ErrorContains(t, err, `model "Qwen/Qwen3-32B" is not among the models the server at `+s.URL+`/v1 serves (Qwen/Qwen3-8B)`)
}

func TestCheckFailures(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	err = checker(t, map[string]string{"base_url": "http://" + addr + "/v1"}).Check(t.Context())
	require.ErrorContains(t, err, "no model server answers at http://"+addr+"/v1")
	require.ErrorContains(t, err, "connection refused")
	require.ErrorIs(t, err, runtime.ErrUnavailable, "nothing there: unavailable, as during a run")

	const key = "sk-check-test-7e1b2c"
	t.Setenv("FORKLINE_CHECK_KEY", key)
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/v1/models", r.URL.Path)
		assert.Equal(t, "Bearer "+key, r.Header.Get("Authorization"), "the key is sent")
		http.Error(w, `{"error":"bad key"}`, http.StatusUnauthorized)
	}))
	defer refuse.Close()
	err = checker(t, map[string]string{"base_url": refuse.URL + "/v1", "api_key_env": "FORKLINE_CHECK_KEY"}).Check(t.Context())
	require.ErrorContains(t, err, "refused the request (HTTP 401")
	require.ErrorContains(t, err, "$FORKLINE_CHECK_KEY")
	require.NotContains(t, err.Error(), key)

	noList := httptest.NewServer(http.NotFoundHandler())
	defer noList.Close()
	require.NoError(t, checker(t, map[string]string{"base_url": noList.URL + "/v1", "model": "m"}).Check(t.Context()),
		"a server without the route answered: let through")
}
