package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/replay"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/serve"
	"github.com/forkline/forkline/serve/openenvtest"
	"github.com/forkline/forkline/task"
)

const exampleTasks = "../examples/tasks"

// testServer is a server running in this process on a loopback port.
type testServer struct {
	base, work, out string
	cancel          context.CancelFunc
	done            chan struct{}
	sum             *serve.Summary
	err             error
}

// startServer runs serve.Run with cfg (its Addr, WorkDir and Log filled
// in) until stop.
func startServer(t *testing.T, cfg serve.Config) *testServer {
	t.Helper()
	ts := &testServer{work: t.TempDir(), out: cfg.Out, done: make(chan struct{})}
	cfg.Addr = "127.0.0.1:0"
	cfg.WorkDir = ts.work
	if cfg.Tasks == "" {
		cfg.Tasks = exampleTasks
	}
	if os.Getenv("SERVE_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ready := make(chan string, 1)
	cfg.Ready = func(a net.Addr) { ready <- "http://" + a.String() }
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	go func() {
		defer close(ts.done)
		ts.sum, ts.err = serve.Run(ctx, cfg)
	}()
	select {
	case ts.base = <-ready:
	case <-ts.done:
		t.Fatalf("the server did not start: %v", ts.err)
	case <-time.After(time.Minute):
		t.Fatal("the server did not start within a minute")
	}
	t.Cleanup(func() { ts.cancel(); <-ts.done })
	return ts
}

// stop stops the server as a signal would and returns its summary.
func (ts *testServer) stop(t *testing.T) *serve.Summary {
	t.Helper()
	ts.cancel()
	<-ts.done
	require.NoError(t, ts.err)
	return ts.sum
}

// sandboxes counts the live sandboxes of the local provider in work.
func sandboxes(t *testing.T, work string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(work, "forkline-local-*", "sb-*"))
	require.NoError(t, err)
	return len(m)
}

func requireNoSandboxes(t *testing.T, work string) {
	t.Helper()
	require.Eventually(t, func() bool { return sandboxes(t, work) == 0 }, 30*time.Second, 10*time.Millisecond,
		"sandboxes left after the clients went away: %d", sandboxes(t, work))
}

// exampleSpecs are the example tasks with their scripted solutions.
func exampleSpecs(t *testing.T) []task.Spec {
	t.Helper()
	specs, err := task.Load(exampleTasks)
	require.NoError(t, err)
	sort.Slice(specs, func(a, b int) bool { return specs[a].ID < specs[b].ID })
	return specs
}

// canonical is a canonical action as the client sends it: its JSON form.
func canonical(a runtime.Action) map[string]any {
	b, _ := json.Marshal(a)
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

var (
	offlineMu      sync.Mutex
	offlineByTasks = map[string]map[string]*float64{}
)

// scriptedRewards are the rewards each example task's scripted solution
// earns when forkline collect runs it offline: what the served episodes
// driven with the same actions must earn.
func scriptedRewards(t *testing.T) map[string]*float64 { return scriptedRewardsOf(t, exampleTasks) }

func scriptedRewardsOf(t *testing.T, tasks string) map[string]*float64 {
	t.Helper()
	offlineMu.Lock()
	defer offlineMu.Unlock()
	if r, ok := offlineByTasks[tasks]; ok {
		return r
	}
	var offlineRewards map[string]*float64
	var offlineErr error
	func() {
		dir, err := os.MkdirTemp("", "serve-offline-")
		if err != nil {
			offlineErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "run")
		if _, err := collect.Run(context.Background(), collect.Config{Tasks: tasks, Out: out, WorkDir: dir, Replicas: 2}); err != nil {
			offlineErr = err
			return
		}
		ds, err := shard.Open(out)
		if err != nil {
			offlineErr = err
			return
		}
		byEpisode := map[string]string{}
		for ep, err := range ds.Episodes() {
			if err != nil {
				offlineErr = err
				return
			}
			byEpisode[ep.EpisodeID] = ep.TaskID
		}
		offlineRewards = map[string]*float64{}
		for r, err := range ds.Rewards() {
			if err != nil {
				offlineErr = err
				return
			}
			offlineRewards[byEpisode[r.EpisodeID]] = r.Value
		}
	}()
	require.NoError(t, offlineErr)
	offlineByTasks[tasks] = offlineRewards
	return offlineRewards
}

// schemaSet compiles the server's /schema with an independent JSON Schema
// validator.
type schemaSet struct{ action, observation, state *jsonschema.Schema }

func fetchSchemas(t *testing.T, base string) schemaSet {
	t.Helper()
	status, body, err := openenvtest.HTTPJSON("GET", base+"/schema", nil)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	c := jsonschema.NewCompiler()
	var out schemaSet
	for name, dst := range map[string]**jsonschema.Schema{"action": &out.action, "observation": &out.observation, "state": &out.state} {
		require.Contains(t, body, name)
		require.NoError(t, c.AddResource("mem://"+name, body[name]))
		s, err := c.Compile("mem://" + name)
		require.NoError(t, err, "the %s schema is not a valid JSON Schema", name)
		*dst = s
	}
	return out
}

// transcript is what one client sent and received in one episode.
type transcript struct {
	episodeID, taskID string
	actions           []map[string]any
	observations      []map[string]any
	reward            *float64
	exit              string
}

// playSolution resets c into task t with episode id id and steps the
// task's scripted solution, checking each answer as OpenEnv's protocol
// defines it and against the published schemas.
func playSolution(c *openenvtest.Client, sch schemaSet, t task.Spec, id string, actionOf func(runtime.Action) map[string]any) (transcript, error) {
	tr := transcript{episodeID: id, taskID: t.ID}
	r, err := c.Reset(map[string]any{"task_id": t.ID, "episode_id": id})
	if err != nil {
		return tr, fmt.Errorf("reset: %w", err)
	}
	if err := sch.observation.Validate(r.Observation); err != nil {
		return tr, fmt.Errorf("reset observation breaks the schema: %v", err)
	}
	if r.Done || r.Reward != nil || r.Observation["episode_id"] != id || r.Observation["task_id"] != t.ID ||
		r.Observation["instruction"] != t.Instruction || r.Observation["step"] != 0.0 {
		return tr, fmt.Errorf("reset answered %+v", r)
	}
	for i, a := range t.Solution {
		am := actionOf(a)
		if err := sch.action.Validate(am); err != nil {
			return tr, fmt.Errorf("the solution's action %d breaks the action schema: %v", i, err)
		}
		r, err := c.Step(am)
		if err != nil {
			return tr, fmt.Errorf("step %d: %w", i, err)
		}
		if err := sch.observation.Validate(r.Observation); err != nil {
			return tr, fmt.Errorf("step %d observation breaks the schema: %v", i, err)
		}
		tr.actions = append(tr.actions, am)
		tr.observations = append(tr.observations, r.Observation)
		last := i == len(t.Solution)-1
		if r.Done != last {
			return tr, fmt.Errorf("step %d of %d: done = %v", i, len(t.Solution), r.Done)
		}
		if r.Observation["step"] != float64(i+1) {
			return tr, fmt.Errorf("step %d: observation step %v", i, r.Observation["step"])
		}
		if !last && r.Reward != nil {
			return tr, fmt.Errorf("step %d: a reward before the end: %v", i, *r.Reward)
		}
		if last {
			tr.reward = r.Reward
			tr.exit, _ = r.Observation["exit_reason"].(string)
		}
	}
	st, err := c.State()
	if err != nil {
		return tr, fmt.Errorf("state: %w", err)
	}
	if err := sch.state.Validate(st); err != nil {
		return tr, fmt.Errorf("state breaks the schema: %v", err)
	}
	if st["episode_id"] != id || st["step_count"] != float64(len(t.Solution)) || st["done"] != true {
		return tr, fmt.Errorf("state after the episode: %v", st)
	}
	return tr, nil
}

func sameReward(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// N concurrent sessions, each resetting into every example task in turn
// and stepping its scripted solution: every episode ends done with the
// reward the solution earns offline; no sandbox outlives the clients or
// the server; the recorded dataset holds exactly what the clients sent
// and received, verifies, and replays identically.
func TestConcurrentSessionsEarnTheScriptedRewardsAndAreRecorded(t *testing.T) {
	sessions := 64
	if testing.Short() {
		sessions = 8
	}
	want := scriptedRewards(t)
	specs := exampleSpecs(t)
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Out: out, MaxSessions: sessions})
	sch := fetchSchemas(t, ts.base)

	results := make([][]transcript, sessions)
	errs := make([]error, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := openenvtest.Dial(ts.base)
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Disconnect()
			for k := range specs {
				sp := specs[(i+k)%len(specs)]
				tr, err := playSolution(c, sch, sp, fmt.Sprintf("trainer-%02d-%s", i, sp.ID), canonical)
				if err != nil {
					errs[i] = fmt.Errorf("session %d, task %s: %w", i, sp.ID, err)
					return
				}
				results[i] = append(results[i], tr)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	byID := map[string]transcript{}
	for _, rs := range results {
		for _, tr := range rs {
			require.True(t, sameReward(want[tr.taskID], tr.reward), "task %s: reward %s, the scripted solution earns %s (%+v)", tr.taskID, fmtReward(tr.reward), fmtReward(want[tr.taskID]), tr)
			require.Equal(t, "done", tr.exit)
			byID[tr.episodeID] = tr
		}
	}
	require.Len(t, byID, sessions*len(specs))
	requireNoSandboxes(t, ts.work)

	sum := ts.stop(t)
	require.Equal(t, sessions, sum.Sessions)
	require.Equal(t, sessions*len(specs), sum.Episodes["done"])
	require.Equal(t, sessions*len(specs), sum.Kept)
	left, err := os.ReadDir(ts.work)
	require.NoError(t, err)
	require.Empty(t, left, "the stopped server left sandboxes or checkpoints behind")

	checkRecorded(t, out, byID)
	rep, err := shard.Verify(out)
	require.NoError(t, err)
	require.True(t, rep.OK(), "forkline verify: %v", rep.Problems)

	replayed, err := replay.Run(context.Background(), replay.Config{In: out, WorkDir: t.TempDir(), Replicas: 2})
	require.NoError(t, err)
	var odd []string
	for _, e := range replayed.Episodes {
		if e.Status != replay.Identical {
			b, _ := json.Marshal(e)
			odd = append(odd, string(b))
		}
	}
	require.Equal(t, sessions*len(specs), replayed.Identical, "replay: %d identical, %d diverged, %d errored; the others:\n%s",
		replayed.Identical, replayed.Diverged, replayed.Errored, strings.Join(odd, "\n"))
}

// checkRecorded reads the dataset back and compares it with what the
// clients sent and received: the steps through arrow-go (a Parquet
// implementation forkline does not write with), the episodes and rewards
// through forkline's reader.
func checkRecorded(t *testing.T, dir string, byID map[string]transcript) {
	t.Helper()
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	m := ds.Manifest()
	require.Equal(t, shard.StatusComplete, m.Status)
	pol, err := manifest.DecodePolicy(m.Policy)
	require.NoError(t, err)
	require.Equal(t, "external", pol.Name, "the policy entry says an external client acted")

	eps := 0
	for ep, err := range ds.Episodes() {
		require.NoError(t, err)
		tr, ok := byID[ep.EpisodeID]
		require.True(t, ok, "episode %s was never played by a client", ep.EpisodeID)
		require.Equal(t, tr.taskID, ep.TaskID)
		require.Equal(t, "done", ep.ExitReason)
		require.Equal(t, int32(len(tr.actions)), ep.Steps)
		require.Contains(t, ep.ResetStrategy, "fork")
		eps++
	}
	require.Equal(t, len(byID), eps)
	rewards := 0
	for r, err := range ds.Rewards() {
		require.NoError(t, err)
		require.True(t, sameReward(byID[r.EpisodeID].reward, r.Value), "episode %s: recorded reward %v, the client got %v", r.EpisodeID, r.Value, byID[r.EpisodeID].reward)
		rewards++
	}
	require.Equal(t, len(byID), rewards)

	steps := arrowSteps(t, dir, ds.Shards(schemas.TableSteps))
	n := 0
	for key, row := range steps {
		tr := byID[key.episode]
		require.Less(t, key.index, len(tr.actions), "episode %s has an extra step %d", key.episode, key.index)
		var recorded, sent map[string]any
		require.NoError(t, json.Unmarshal([]byte(row.action), &recorded))
		b, _ := json.Marshal(tr.actions[key.index])
		json.Unmarshal(b, &sent)
		require.Equal(t, sent, recorded, "episode %s step %d: the recorded action is not the one sent", key.episode, key.index)
		got := tr.observations[key.index]
		if sent["kind"] != "done" {
			require.Equal(t, got["output"], row.output, "episode %s step %d: the recorded output is not the one the client got", key.episode, key.index)
			require.Equal(t, got["exit_code"], float64(row.exitCode))
		}
		n++
	}
	total := 0
	for _, tr := range byID {
		total += len(tr.actions)
	}
	require.Equal(t, total, n)
}

func fmtReward(r *float64) string {
	if r == nil {
		return "null"
	}
	return fmt.Sprint(*r)
}
