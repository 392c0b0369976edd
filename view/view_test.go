package view

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The episode list's filters are checked against DuckDB, and the pages in
// Chromium, over datasets the real collect writes: cmd/forkline's TestView.
// Here: what needs no dataset.

func TestParseQuery(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	b := func(x bool) *bool { return &x }
	for _, tc := range []struct {
		name, in string
		want     Query
		err      string
	}{
		{name: "defaults", in: "", want: Query{Sort: "episode_id", Limit: DefaultLimit}},
		{name: "lists, repeated and comma-separated", in: "task=a,b&task=c&exit=done",
			want: Query{Tasks: []string{"a", "b", "c"}, Exits: []string{"done"}, Sort: "episode_id", Limit: DefaultLimit}},
		{name: "ranges and flags", in: "min_reward=0.5&max_reward=1&drift=true&branch=false&text=ls -la&sort=reward&desc=1&offset=10&limit=20",
			want: Query{MinReward: f(0.5), MaxReward: f(1), Drift: b(true), Branch: b(false), Text: "ls -la", Sort: "reward", Desc: true, Offset: 10, Limit: 20}},
		{name: "unknown parameter", in: "where=x", err: `unknown parameter "where" (known: task, exit`},
		{name: "bad number", in: "min_reward=high", err: `min_reward="high": want a number`},
		{name: "NaN", in: "max_reward=NaN", err: `max_reward="NaN": want a number`},
		{name: "bad bool", in: "drift=maybe", err: `drift="maybe": want true or false`},
		{name: "unknown sort", in: "sort=colour", err: `sort="colour": unknown column (known: episode_id, task_id`},
		{name: "limit too large", in: "limit=5000", err: "limit=5000: want 1 to 1000"},
		{name: "window too deep", in: "offset=99999&limit=2", err: "offset+limit may be at most 100000"},
		{name: "negative offset", in: "offset=-1", err: "offset=-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := url.ParseQuery(tc.in)
			require.NoError(t, err)
			q, err := ParseQuery(v)
			if tc.err != "" {
				require.ErrorIs(t, err, ErrQuery)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, q)
		})
	}
}

func TestRowOrder(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	rows := []Row{
		{EpisodeID: "d", Reward: nil, Steps: 2},
		{EpisodeID: "c", Reward: f(1), Steps: 2},
		{EpisodeID: "b", Reward: f(0), Steps: 5},
		{EpisodeID: "a", Reward: f(1), Steps: 1},
		{EpisodeID: "e", Reward: nil, Steps: 5},
	}
	ids := func(key string, desc bool) []string {
		r := slices.Clone(rows)
		slices.SortFunc(r, rowLess(key, desc))
		var out []string
		for _, x := range r {
			out = append(out, x.EpisodeID)
		}
		return out
	}
	// As SQL's ORDER BY reward [DESC] NULLS LAST, episode_id.
	assert.Equal(t, []string{"b", "a", "c", "d", "e"}, ids("reward", false))
	assert.Equal(t, []string{"a", "c", "b", "d", "e"}, ids("reward", true))
	assert.Equal(t, []string{"b", "e", "c", "d", "a"}, ids("steps", true), "ties by episode id ascending")
}

func TestCheckAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.2:0": true, "[::1]:8080": true, "localhost:8080": true,
		"0.0.0.0:8080": false, ":8080": false, "192.168.1.4:8080": false, "[::]:8080": false, "example.com:80": false,
	} {
		err := CheckAddr(addr, false)
		assert.Equal(t, ok, err == nil, "%s: %v", addr, err)
		assert.NoError(t, CheckAddr(addr, true), "-remote allows %s", addr)
	}
	assert.Error(t, CheckAddr("8080", true), "not HOST:PORT")
}

func TestHostAndMethod(t *testing.T) {
	s := &Server{cfg: Config{Reward: "verify"}}
	s.routes()
	for _, tc := range []struct {
		method, host string
		any          bool
		code         int
	}{
		{"GET", "127.0.0.1:8080", false, http.StatusOK},
		{"GET", "localhost:8080", false, http.StatusOK},
		{"GET", "[::1]:8080", false, http.StatusOK},
		{"GET", "attacker.example", false, http.StatusForbidden},
		{"GET", "attacker.example", true, http.StatusOK},
		{"POST", "127.0.0.1:8080", false, http.StatusMethodNotAllowed},
		{"DELETE", "127.0.0.1:8080", false, http.StatusMethodNotAllowed},
	} {
		s.cfg.AnyHost = tc.any
		req := httptest.NewRequest(tc.method, "/api/runs", nil)
		req.Host = tc.host
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		assert.Equal(t, tc.code, rec.Code, "%s %s (any host %v)", tc.method, tc.host, tc.any)
		if tc.code == http.StatusOK {
			assert.Contains(t, rec.Header().Get("Content-Security-Policy"), "default-src 'none'")
		}
	}
}

func TestAssetsAreEmbedded(t *testing.T) {
	s := &Server{cfg: Config{Reward: "verify"}}
	s.routes()
	for path, typ := range map[string]string{"/": "text/html", "/assets/app.js": "text/javascript", "/assets/app.css": "text/css"} {
		req := httptest.NewRequest("GET", path, nil)
		req.Host = "127.0.0.1"
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusOK, rec.Code, path)
		assert.Contains(t, rec.Header().Get("Content-Type"), typ, path)
		assert.NotContains(t, rec.Body.String(), "http://", "%s: no external fetch", path)
		assert.NotContains(t, rec.Body.String(), "https://", "%s: no external fetch", path)
	}
}
