package main

import (
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/policy/openai/openaitest"
	"github.com/forkline/forkline/task"
)

// modelServer is the scripted model server behind an address the test
// controls: it can be started, stopped (nothing listens any more) and
// started again on the same address, as a restarted vLLM would be.
type modelServer struct {
	t      *testing.T
	addr   string
	target *url.URL
	// stopAfter > 0 stops the server when that many model turns have come:
	// the one that finds it stopping gets its connection dropped.
	stopAfter atomic.Int64
	requests  atomic.Int64

	mu  sync.Mutex
	srv *http.Server
}

func newModelServer(t *testing.T) *modelServer {
	backend := openaitest.New(t, map[string][]openaitest.Turn{
		"act": {
			{ToolCalls: []openaitest.ToolCall{{ID: "c1", Name: "exec", Args: `{"cmd":"echo hi"}`}}},
			{ToolCalls: []openaitest.ToolCall{{ID: "c2", Name: "done", Args: `{}`}}},
		},
	})
	target, err := url.Parse(strings.TrimSuffix(backend.URL, "/v1"))
	require.NoError(t, err)
	// An address that is free now: nothing listens until start.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	m := &modelServer{t: t, addr: addr, target: target}
	t.Cleanup(m.stop)
	return m
}

func (m *modelServer) URL() string { return "http://" + m.addr + "/v1" }

func (m *modelServer) start() {
	l, err := net.Listen("tcp", m.addr)
	require.NoError(m.t, err)
	proxy := httputil.NewSingleHostReverseProxy(m.target)
	proxy.ErrorLog = log.New(io.Discard, "", 0) // requests cut by the stop
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only model turns count: the policy's probe of what the server
		// offers comes first, once per run.
		if r.URL.Path != "/v1/chat/completions" {
			proxy.ServeHTTP(w, r)
			return
		}
		if n := m.requests.Add(1); m.stopAfter.Load() > 0 && n > m.stopAfter.Load() {
			// Stop at once, as a killed server does: the listener closes
			// (new connections are refused) and every open connection,
			// this one included, is cut.
			m.stop()
			return
		}
		proxy.ServeHTTP(w, r)
	})}
	m.mu.Lock()
	m.srv = srv
	m.mu.Unlock()
	go srv.Serve(l)
}

func (m *modelServer) stop() {
	m.mu.Lock()
	srv := m.srv
	m.srv = nil
	m.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// actTasks writes one openai task ("scenario: act").
func actTasks(t *testing.T) string {
	spec := filepath.Join(t.TempDir(), "act.yaml")
	require.NoError(t, os.WriteFile(spec, []byte("id: act\ninstruction: 'scenario: act'\n"), 0o644))
	return spec
}

func actIDs(t *testing.T, out string, repeats int) []string {
	ds, err := shard.Open(out)
	require.NoError(t, err)
	specs, err := task.DecodeRecords(ds.Manifest().Tasks)
	require.NoError(t, err)
	var ids []string
	for r := range repeats {
		ids = append(ids, collect.EpisodeID("act", specs["act"].Hash(), r, 0))
	}
	sort.Strings(ids)
	return ids
}

// collectOpenAI runs the collector against srv and returns its exit code,
// its summary (-json) and what it logged.
func collectOpenAI(t *testing.T, srv *modelServer, out string, repeats string) (int, collect.Report, string) {
	cmd := collectProcess("-tasks", actTasks(t), "-out", out, "-workdir", t.TempDir(), "-replicas", "2",
		"-repeats", repeats, "-policy", "openai", "-base-url", srv.URL(), "-model", "m", "-retries", "2",
		"-policy-opt", "backoff=20ms", "-policy-opt", "backoff_max=50ms", "-quiet", "-json")
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=")
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	require.True(t, err == nil || errors.As(err, &ee), "%v", err)
	var rep collect.Report
	require.NoError(t, json.Unmarshal([]byte(stdout.String()), &rep), "%s", stdout.String())
	return exitCode(err), rep, stderr.String()
}

// A model URL where nothing listens when the run starts is found before
// anything is spent: the service is unavailable (exit 4), one message says
// so, and no run is left behind; once the server is up, the same command
// collects the run.
func TestModelServerNotListeningAtStart(t *testing.T) {
	srv := newModelServer(t)
	out := filepath.Join(t.TempDir(), "run")
	cmd := collectProcess("-tasks", actTasks(t), "-out", out, "-workdir", t.TempDir(), "-replicas", "2",
		"-repeats", "4", "-policy", "openai", "-base-url", srv.URL(), "-model", "m", "-quiet")
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=")
	printed, err := cmd.CombinedOutput()
	require.Equal(t, cli.ExitUnavailable, exitCode(err), "%s", printed)
	require.Contains(t, string(printed), "no model server answers at "+srv.URL())
	require.Contains(t, string(printed), "nothing was collected")
	require.Equal(t, 1, strings.Count(string(printed), "no model server answers"), "one message: %s", printed)
	_, statErr := os.Stat(filepath.Join(out, shard.ManifestFile))
	require.True(t, os.IsNotExist(statErr), "no run is left behind")
	require.Zero(t, srv.requests.Load(), "nothing listened, nothing was asked")

	srv.start()
	code, rep, printedAgain := collectOpenAI(t, srv, out, "4")
	require.Equal(t, cli.ExitOK, code, printedAgain)
	require.Equal(t, "complete", rep.Status)
	kept, _ := keptIDs(t, out)
	require.Equal(t, actIDs(t, out, 4), kept)
}

// The model server stops mid-run: the episodes it ends are not kept,
// scheduling stops, the run exits 4 partial; once it is back on the same
// address, the printed command completes the run with exactly the planned
// episodes, none twice.
func TestModelServerStoppedMidRunThenResume(t *testing.T) {
	srv := newModelServer(t)
	srv.stopAfter.Store(5) // each episode makes 2 requests
	srv.start()
	out := filepath.Join(t.TempDir(), "run")
	code, rep, printed := collectOpenAI(t, srv, out, "10")
	require.Equal(t, cli.ExitUnavailable, code, printed)
	require.Contains(t, printed, "not kept")
	require.Contains(t, printed, "the model server cannot be reached")
	require.Positive(t, rep.NotRun)
	require.LessOrEqual(t, rep.NotRun, 2, "scheduling stopped: only the episodes in flight (2 replicas) were lost")
	require.NotEmpty(t, rep.Unavailable)
	require.Equal(t, shard.StatusPartial, manifestStatus(t, out))
	kept, _ := keptIDs(t, out)
	require.NotEmpty(t, kept)
	require.Less(t, len(kept), 10)
	ds, err := shard.Open(out)
	require.NoError(t, err)
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		require.Equal(t, "done", e.ExitReason, "only whole episodes are kept: %s", e.Detail)
	}

	srv.stopAfter.Store(0)
	srv.start()
	code, resumed := runShell(t, finishCommand(t, printed))
	require.Equal(t, cli.ExitOK, code, resumed)
	require.Equal(t, shard.StatusComplete, manifestStatus(t, out))
	got, _ := keptIDs(t, out)
	require.Equal(t, actIDs(t, out, 10), got, "exactly the planned episodes, none twice")
}
