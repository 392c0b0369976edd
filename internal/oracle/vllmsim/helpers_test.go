package vllmsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// post sends body as JSON and decodes the answer into a generic value. It
// fails t, so it is for the test goroutine; other goroutines call postJSON.
func post(t *testing.T, s *Server, path string, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return postRaw(t, s, path, b)
}

func postRaw(t *testing.T, s *Server, path string, body []byte) (int, map[string]any) {
	t.Helper()
	status, out, err := postBytes(s, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return status, out
}

// postJSON is post that returns its failure instead of failing a test.
func postJSON(s *Server, path string, body any) (int, map[string]any, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	return postBytes(s, path, b)
}

func postBytes(s *Server, path string, body []byte) (int, map[string]any, error) {
	resp, err := http.Post(s.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			return 0, nil, fmt.Errorf("%s: answer is not JSON: %v\n%s", path, err, raw)
		}
	} else {
		out = map[string]any{"_raw": string(raw)}
	}
	return resp.StatusCode, out, nil
}

// ids reads a JSON array of numbers.
func ids(t *testing.T, v any) []int32 {
	t.Helper()
	arr, ok := v.([]any)
	if !ok {
		t.Fatalf("want a list of token ids, got %T %v", v, v)
	}
	out := make([]int32, len(arr))
	for i, x := range arr {
		out[i] = int32(x.(float64))
	}
	return out
}

func choice0(t *testing.T, resp map[string]any) map[string]any {
	t.Helper()
	cs, ok := resp["choices"].([]any)
	if !ok || len(cs) != 1 {
		t.Fatalf("want one choice, got %v", resp)
	}
	return cs[0].(map[string]any)
}

func hasPrefix(full, prefix []int32) bool {
	if len(prefix) > len(full) {
		return false
	}
	for i := range prefix {
		if full[i] != prefix[i] {
			return false
		}
	}
	return true
}

func firstMismatch(full, prefix []int32) int {
	for i := range prefix {
		if i >= len(full) || full[i] != prefix[i] {
			return i
		}
	}
	return -1
}

func equalIDs(a, b []int32) bool { return len(a) == len(b) && hasPrefix(a, b) }
