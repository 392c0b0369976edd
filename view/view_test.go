package view

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/forkline/forkline/export"
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
		{name: "export's where and episode prefixes", in: "where=provider!=docker&episode=ep-1,ep-2",
			want: Query{Where: []export.Where{{Column: "provider", Not: true, Values: []string{"docker"}}}, Episodes: []string{"ep-1", "ep-2"}, Sort: "episode_id", Limit: DefaultLimit}},
		{name: "unknown parameter", in: "colour=x", err: `unknown parameter "colour" (known: task, exit`},
		{name: "bad where", in: "where=colour=red", err: `where="colour=red"`},
		{name: "unindexed where", in: "where=has_tokens=true", err: "cannot filter on has_tokens"},
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

func TestEntryOrder(t *testing.T) {
	x := newIndex()
	e := func(id string, reward *float64, steps int32) entry {
		en := entry{id: id, steps: steps}
		if reward != nil {
			en.reward, en.hasReward = *reward, true
		}
		return en
	}
	f := func(x float64) *float64 { return &x }
	rows := []entry{e("d", nil, 2), e("c", f(1), 2), e("b", f(0), 5), e("a", f(1), 1), e("e", nil, 5)}
	ids := func(key string, desc bool) []string {
		var r []*entry
		for i := range rows {
			r = append(r, &rows[i])
		}
		slices.SortFunc(r, x.entryLess(key, desc))
		var out []string
		for _, x := range r {
			out = append(out, x.id)
		}
		return out
	}
	// As SQL's ORDER BY reward [DESC] NULLS LAST, episode_id.
	assert.Equal(t, []string{"b", "a", "c", "d", "e"}, ids("reward", false))
	assert.Equal(t, []string{"a", "c", "b", "d", "e"}, ids("reward", true))
	assert.Equal(t, []string{"b", "e", "c", "d", "a"}, ids("steps", true), "ties by episode id ascending")
	// topK keeps the same first rows as a full sort.
	var all []*entry
	for i := range rows {
		all = append(all, &rows[i])
	}
	less := x.entryLess("steps", true)
	top := topK(slices.Clone(all), 2, less)
	slices.SortFunc(all, less)
	assert.Equal(t, all[:2], top)
}

func TestContainsFold(t *testing.T) {
	for _, tc := range []struct {
		s, sub string
		want   bool
	}{
		{"wc -l < notes.txt", "wc -l", true},
		{"WC -L", "wc -l", true},
		{"MIGRATE the db", "migrate", true},
		{"migrat", "migrate", false},
		{"Ärger im Büro", "ärger", true},
		{"ÄRGER", "ärger", true},
		{"plain ascii", "ä", false},
		{"anything", "", true},
	} {
		assert.Equal(t, tc.want, containsFoldBytes([]byte(tc.s), []byte(tc.sub)), "%q in %q", tc.sub, tc.s)
		assert.Equal(t, tc.want, strings.Contains(strings.ToLower(tc.s), tc.sub), "the rule is strings.ToLower's: %q in %q", tc.sub, tc.s)
	}
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

func TestEntrySizeIsTheDocumented(t *testing.T) {
	// The documented size is a 64-bit platform's (forkline's).
	if unsafe.Sizeof(uintptr(0)) == 8 {
		assert.Equal(t, 112, EntryBytes, "view/index.go and docs/cli.md state an indexed episode's fixed size")
	}
}
