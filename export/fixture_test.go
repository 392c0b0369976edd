package export

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

func ptr[T any](v T) *T { return &v }

// Screenshots: tiny byte strings standing in for PNGs (nothing decodes
// them here).
var (
	shotBlob = []byte("\x89PNG\r\n\x1a\nstored-by-hash")
	shotFull = []byte("\x89PNG\r\n\x1a\nkept-in-the-row")
)

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// runSpec describes a fixture run.
type runSpec struct {
	runID    string
	policy   map[string]any
	pixels   string
	episodes []shard.EpisodeBatch
}

var fixtureTasks = []task.Spec{
	{ID: "shell", Instruction: "List the files & count them.", Verify: &task.Verify{Cmd: "test -f count.txt", Reward: "exit"}},
	{ID: "gui", Instruction: "Press the <Save> button.", Verify: &task.Verify{Cmd: "grep -q saved state", Reward: "exit"}},
}

// writeRun writes a native dataset with shard.Create/Commit, small rolls so
// it spans several generations.
func writeRun(t *testing.T, dir string, r runSpec) string {
	t.Helper()
	var recs []map[string]any
	for _, s := range fixtureTasks {
		s = s.WithDefaults()
		recs = append(recs, map[string]any{"id": s.ID, "hash": s.Hash(), "spec": s})
	}
	tasks, err := json.Marshal(recs)
	require.NoError(t, err)
	pol, err := json.Marshal(r.policy)
	require.NoError(t, err)
	pixels := r.pixels
	if pixels == "" {
		pixels = "hash"
	}
	// The manifest form the collector writes ("text", not the Go field's
	// "text_cap", which the one decoder refuses as unknown).
	capt, _ := json.Marshal(map[string]any{"text": "full", "pixels": pixels, "a11y": "full", "tokens": "keep"})
	path := filepath.Join(dir, r.runID)
	w, err := shard.Create(path, shard.Manifest{RunID: r.runID, Tasks: tasks, Policy: pol, Capture: capt, ToolVersion: "test"},
		shard.Config{RollBytes: 4 << 10})
	require.NoError(t, err)
	for _, b := range r.episodes {
		b.Episode.RunID = r.runID
		require.NoError(t, w.Commit(t.Context(), b), b.Episode.EpisodeID)
	}
	require.NoError(t, w.Close(shard.StatusComplete))
	return path
}

// tokenRecord is a record of turns model turns: each turn 3 model tokens
// (mask 1) followed, except after the last, by 2 environment tokens (mask
// 0, logprob 0.0).
func tokenRecord(turns int, logprobs bool) (prompt, ids, mask []int32, lp []float32) {
	prompt = []int32{100, 101, 102, 103}
	for k := range turns {
		for j := range 3 {
			ids = append(ids, int32(1000+10*k+j))
			mask = append(mask, 1)
			lp = append(lp, -0.125*float32(j+1))
		}
		if k < turns-1 {
			ids = append(ids, 7, 8)
			mask = append(mask, 0, 0)
			lp = append(lp, 0, 0)
		}
	}
	if !logprobs {
		lp = nil
	}
	return
}

type epOpts struct {
	task      string
	exit      string
	turns     int // token turns; 0 = no token record
	logprobs  bool
	drift     bool
	reward    *float64 // episode reward "verify"; nil = verifier gave none
	noReward  bool     // no reward row at all
	gui       bool     // screenshots: one by hash (blob), one kept in the row
	reasoning bool
	// secondCmd replaces the second step's command: the model acting
	// differently at that turn (dpo's pairs need a divergence).
	secondCmd string
}

// episodeBatch builds one episode: exec steps (one failing), GUI steps with
// screenshots when gui, and a final done action when exit is "done".
func episodeBatch(id string, o epOpts) shard.EpisodeBatch {
	var steps []schemas.StepRow
	var blobs []schemas.BlobRow
	add := func(s schemas.StepRow) {
		s.EpisodeID, s.StepIndex, s.TaskID = id, int32(len(steps)), o.task
		steps = append(steps, s)
	}
	text := "I will look around."
	step0 := schemas.StepRow{ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"ls -1 | wc -l > count.txt"}`, Output: "", ModelText: &text, PolicyMS: 1, EnvMS: 2}
	if o.reasoning {
		step0.Reasoning = ptr("count with wc")
	}
	add(step0)
	second := schemas.StepRow{ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"cat missing","timeout_ms":2000}`,
		Output: "cat: missing: No such file or directory\n", ExitCode: 1, IsError: true, ErrorKind: "exit_status"}
	if o.secondCmd != "" {
		second.ActionJSON = `{"kind":"exec","cmd":` + strconv.Quote(o.secondCmd) + `}`
		second.Output, second.ExitCode, second.IsError, second.ErrorKind = "", 0, false, ""
	}
	add(second)
	if o.gui {
		add(schemas.StepRow{ActionKind: "click", ActionJSON: `{"kind":"click","x":12,"y":34}`, ExitCode: -1,
			ScreenHash: sha(shotBlob), ScreenW: 4, ScreenH: 3, AXTree: `[{"role":"button","name":"Save"}]`})
		blobs = append(blobs, schemas.BlobRow{SHA256: sha(shotBlob), Media: "image/png", Data: shotBlob})
		add(schemas.StepRow{ActionKind: "screenshot", ActionJSON: `{"kind":"screenshot"}`, ExitCode: -1,
			Screenshot: shotFull, ScreenHash: sha(shotFull), ScreenW: 4, ScreenH: 3})
	}
	if o.exit == "done" {
		add(schemas.StepRow{ActionKind: "done", ActionJSON: `{"kind":"done","answer":"3 files"}`, ExitCode: -1})
	}
	ep := schemas.EpisodeRow{EpisodeID: id, TaskID: o.task, TaskHash: "h", ExitReason: o.exit, Steps: int32(len(steps)), Provider: "local"}
	if o.exit == "done" {
		ep.Answer = "3 files"
	}
	if o.turns > 0 {
		ep.PromptIDs, ep.ResponseIDs, ep.ResponseMask, ep.ResponseLogprobs = tokenRecord(o.turns, o.logprobs)
		ep.TokenTurns, ep.TokenDrift = int32(o.turns), o.drift
		// The first step carries its own turn's ids too.
		steps[0].PromptIDs, steps[0].ResponseIDs, steps[0].ResponseMask = ep.PromptIDs, ep.ResponseIDs[:3], ep.ResponseMask[:3]
		if o.logprobs {
			steps[0].ResponseLogprobs = ep.ResponseLogprobs[:3]
		}
	}
	b := shard.EpisodeBatch{Episode: ep, Steps: steps, Blobs: blobs}
	if !o.noReward {
		b.Rewards = append(b.Rewards, schemas.RewardRow{EpisodeID: id, Name: "verify", Value: o.reward, Source: "verify", ExitCode: 0})
	}
	b.Rewards = append(b.Rewards, schemas.RewardRow{EpisodeID: id, Name: "style", Value: ptr(0.125), Source: "lint"})
	b.Rewards = append(b.Rewards, schemas.RewardRow{EpisodeID: id, StepIndex: ptr(int32(1)), Name: "verify", Value: ptr(-0.25), Source: "step check"})
	return b
}

// fixture is two runs: run-a (a mix: token records with environment tokens,
// no tokens, drift, GUI steps with screenshots by hash and in the row, null
// rewards) and run-b (a thinking policy, all with tokens).
type fixture struct {
	dir      string
	runA     string
	runB     string
	rewards  map[string]*float64 // episode id → expected verify reward
	tokens   map[string]bool     // episode id → has a usable token record
	logprobs map[string]bool     // episode id → its token record has logprobs
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), rewards: map[string]*float64{}, tokens: map[string]bool{}, logprobs: map[string]bool{}}
	var a, b []shard.EpisodeBatch
	addA := func(id string, o epOpts) {
		a = append(a, episodeBatch(id, o))
		if !o.noReward {
			f.rewards[id] = o.reward
		}
		f.tokens[id] = o.turns > 0 && !o.drift
		f.logprobs[id] = o.turns > 0 && o.logprobs
	}
	addA("a-shell-0", epOpts{task: "shell", exit: "done", turns: 3, logprobs: true, reward: ptr(1.0), reasoning: true})
	addA("a-shell-1", epOpts{task: "shell", exit: "max_steps", reward: ptr(0.0)})
	addA("a-gui-0", epOpts{task: "gui", exit: "done", turns: 2, reward: nil, gui: true})
	addA("a-shell-2", epOpts{task: "shell", exit: "done", turns: 2, logprobs: true, drift: true, reward: ptr(1.0)})
	addA("a-gui-1", epOpts{task: "gui", exit: "timeout", turns: 1, logprobs: true, noReward: true, gui: true})
	for i := range 12 {
		r := float64(i%4) / 4
		addA(fmt.Sprintf("a-bulk-%02d", i), epOpts{task: []string{"shell", "gui"}[i%2], exit: []string{"done", "max_steps", "done"}[i%3],
			turns: 1 + i%3, logprobs: i%5 != 0, reward: &r})
	}
	for i := range 4 {
		id := fmt.Sprintf("b-%d", i)
		r := float64(i) / 3
		b = append(b, episodeBatch(id, epOpts{task: "shell", exit: "done", turns: 2, logprobs: true, reward: &r, reasoning: i == 0, secondCmd: map[int]string{3: "wc -l count.txt"}[i]}))
		f.rewards[id] = &r
		f.tokens[id] = true
		f.logprobs[id] = true
	}
	f.runA = writeRun(t, f.dir, runSpec{runID: "run-a", policy: map[string]any{"name": "script", "options": map[string]string{}}, episodes: a})
	f.runB = writeRun(t, f.dir, runSpec{runID: "run-b", policy: map[string]any{"name": "openai",
		"options": map[string]string{"system_prompt": "You operate a Linux shell.", "enable_thinking": "true",
			"actions": "exec,read_file,done", "observation_cap": "20"}}, episodes: b})
	return f
}
