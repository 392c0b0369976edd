package inspect

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

func ptr[T any](v T) *T { return &v }

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// Screenshots: byte strings standing in for PNGs (nothing decodes them).
var (
	shotRow  = []byte("\x89PNG\r\n\x1a\nkept-in-the-row")
	shotBlob = []byte("\x89PNG\r\n\x1a\nstored-by-hash")
)

var fixtureTasks = []task.Spec{
	{ID: "shell", Instruction: "Count the files.\nWrite the count to count.txt.", Verify: &task.Verify{Cmd: "test -f count.txt", Reward: "exit"}},
	{ID: "gui", Instruction: "Press the Save button.", Verify: &task.Verify{Cmd: "grep -q saved state", Reward: "exit"}},
}

// fixturePolicy is an LLM policy with a recorded conversation, written
// by the policy's own record type as collect writes it: a system prompt, an
// observation cap of 12 bytes (a number), the actions offered (an array)
// and enable_thinking (a bool).
var fixturePolicy = manifest.Policy{
	Name:    "openai",
	Options: map[string]string{"base_url": "http://127.0.0.1:8000/v1", "model": "m"},
	Conversation: &policy.Conversation{SystemPrompt: "You are careful.", ObservationCap: 12, ToolMode: policy.ToolsNative,
		Actions: []runtime.ActionKind{runtime.ActExec, runtime.ActDone}, EnableThinking: ptr(false)},
}

// fixtureManifest is what collect records around the rows.
func fixtureManifest(t *testing.T, runID, pixels string) shard.Manifest {
	t.Helper()
	var recs []map[string]any
	for _, s := range fixtureTasks {
		s = s.WithDefaults()
		recs = append(recs, map[string]any{"id": s.ID, "hash": s.Hash(), "spec": s})
	}
	tasks, err := json.Marshal(recs)
	require.NoError(t, err)
	pol, err := json.Marshal(fixturePolicy)
	require.NoError(t, err)
	capt, _ := json.Marshal(map[string]string{"text": "full", "pixels": pixels, "a11y": "full", "tokens": "keep"})
	return shard.Manifest{RunID: runID, ToolVersion: "test", Tasks: tasks, Policy: pol, Capture: capt,
		Provider: []byte(`{"name":"local","params":{"fork":"copy"},"reset":"fork"}`),
		Plan:     []byte(`{"repeats":3,"seed":7,"replicas":4,"reset":"auto","episodes":6,"part":{"index":0,"count":1},"episodes_all_parts":6}`)}
}

// fixtureEpisodes are six episodes of the two tasks:
//
//	s-done-1   shell done, reward 1, fork/overlay 1 ms, a token record of 2 turns, a step-level "shaped" reward
//	s-done-0   shell done, reward 0, fork/overlay 3 ms, a token record cut at a drift
//	s-max      shell max_steps, a null reward (the verifier gave none), fork/overlay 2 ms
//	s-lost     shell env_error (a scaffold loss), no reward, no replica (reset 0)
//	g-done     gui done, reward 1, recreate/create 100 ms, screenshots in the row and by hash
//	g-half     gui done, reward 0.5, recreate/create 120 ms
func fixtureEpisodes() []shard.EpisodeBatch {
	ep := func(id, taskID, exit string, steps int, strategy, origin string, resetMS float64) schemas.EpisodeRow {
		return schemas.EpisodeRow{EpisodeID: id, TaskID: taskID, ExitReason: exit, Steps: int32(steps), Provider: "local",
			ResetStrategy: strategy, ResetOrigin: origin, ResetMS: resetMS, GoldenID: "g-" + taskID, GoldenBuildMS: 40}
	}
	exec := func(id string, i int, cmd, out string, code int32) schemas.StepRow {
		return schemas.StepRow{EpisodeID: id, StepIndex: int32(i), TaskID: "shell", ActionKind: "exec",
			ActionJSON: fmt.Sprintf(`{"kind":"exec","cmd":%q}`, cmd), Output: out, OutputBytes: int64(len(out)), ExitCode: code}
	}
	done := func(id, taskID string, i int, answer string) schemas.StepRow {
		return schemas.StepRow{EpisodeID: id, StepIndex: int32(i), TaskID: taskID, ActionKind: "done",
			ActionJSON: fmt.Sprintf(`{"kind":"done","answer":%q}`, answer), ExitCode: -1}
	}
	verify := func(id string, v *float64) schemas.RewardRow {
		return schemas.RewardRow{EpisodeID: id, Name: "verify", Value: v, Source: "test -f count.txt"}
	}

	d1 := ep("s-done-1", "shell", "done", 2, "fork", "overlay", 1)
	d1.PromptIDs, d1.ResponseIDs, d1.ResponseMask, d1.TokenTurns = []int32{1, 2}, []int32{3, 4, 5}, []int32{1, 0, 1}, 2
	d1.Answer = "3 files"
	s0 := exec("s-done-1", 0, "ls | wc -l > count.txt; cat count.txt", "3\nand a long tail that the cap elides\n", 0)
	s0.ModelText, s0.Reasoning, s0.FinishReason = ptr("I will count them."), ptr("ls lists the files."), ptr("tool_calls")
	s1 := done("s-done-1", "shell", 1, "3 files")
	s1.ModelText = ptr("Done.")

	d0 := ep("s-done-0", "shell", "done", 1, "fork", "overlay", 3)
	d0.PromptIDs, d0.ResponseIDs, d0.ResponseMask, d0.TokenTurns, d0.TokenDrift = []int32{1}, []int32{2}, []int32{1}, 1, true

	g := ep("g-done", "gui", "done", 3, "recreate", "create", 100)
	g0 := schemas.StepRow{EpisodeID: "g-done", StepIndex: 0, TaskID: "gui", ActionKind: "screenshot", ActionJSON: `{"kind":"screenshot"}`,
		ExitCode: -1, Screenshot: shotRow, ScreenHash: sha(shotRow), ScreenW: 800, ScreenH: 600, AXTree: `{"role":"button","name":"Save"}`}
	g1 := schemas.StepRow{EpisodeID: "g-done", StepIndex: 1, TaskID: "gui", ActionKind: "click", ActionJSON: `{"kind":"click","x":10,"y":20}`,
		ExitCode: -1, ScreenHash: sha(shotBlob), ScreenW: 800, ScreenH: 600}
	gh := ep("g-half", "gui", "done", 1, "recreate", "create", 120)

	return []shard.EpisodeBatch{
		{Episode: d1, Steps: []schemas.StepRow{s0, s1}, Rewards: []schemas.RewardRow{verify("s-done-1", ptr(1.0)),
			{EpisodeID: "s-done-1", StepIndex: ptr(int32(0)), Name: "shaped", Value: ptr(0.25)}}},
		{Episode: d0, Steps: []schemas.StepRow{done("s-done-0", "shell", 0, "")}, Rewards: []schemas.RewardRow{verify("s-done-0", ptr(0.0))}},
		{Episode: ep("s-max", "shell", "max_steps", 1, "fork", "overlay", 2), Steps: []schemas.StepRow{exec("s-max", 0, "sleep 1", "", 0)},
			Rewards: []schemas.RewardRow{verify("s-max", nil)}},
		{Episode: schemas.EpisodeRow{EpisodeID: "s-lost", TaskID: "shell", ExitReason: "env_error", Detail: "sandbox died", Provider: "local"}},
		{Episode: g, Steps: []schemas.StepRow{g0, g1, done("g-done", "gui", 2, "saved")},
			Rewards: []schemas.RewardRow{verify("g-done", ptr(1.0))},
			Blobs:   []schemas.BlobRow{{SHA256: sha(shotBlob), Media: "image/png", Data: shotBlob}}},
		{Episode: gh, Steps: []schemas.StepRow{done("g-half", "gui", 0, "")}, Rewards: []schemas.RewardRow{verify("g-half", ptr(0.5))}},
	}
}

// writeFixture writes the fixture dataset with small rolls, so that it
// spans several generations, and returns its directory.
func writeFixture(t *testing.T) string {
	t.Helper()
	return writeDataset(t, fixtureManifest(t, "run-fixture", "hash"), fixtureEpisodes(), shard.Config{RollBytes: 1 << 10})
}

func writeDataset(t *testing.T, m shard.Manifest, batches []shard.EpisodeBatch, cfg shard.Config) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), m.RunID)
	w, err := shard.Create(dir, m, cfg)
	require.NoError(t, err)
	for _, b := range batches {
		b.Episode.RunID = m.RunID
		require.NoError(t, w.Commit(t.Context(), b), b.Episode.EpisodeID)
	}
	require.NoError(t, w.Close(shard.StatusComplete))
	return dir
}

// noPixelsEpisode is a gui episode of a run that kept no pixels
// (pixels=none): its screenshot has a hash and a size, no bytes anywhere.
func noPixelsEpisode() shard.EpisodeBatch {
	return shard.EpisodeBatch{
		Episode: schemas.EpisodeRow{EpisodeID: "g-none", TaskID: "gui", ExitReason: "done", Steps: 1, Provider: "local"},
		Steps: []schemas.StepRow{{EpisodeID: "g-none", StepIndex: 0, TaskID: "gui", ActionKind: "screenshot", ActionJSON: `{"kind":"screenshot"}`,
			ExitCode: -1, ScreenHash: sha([]byte("never stored")), ScreenW: 640, ScreenH: 480}},
	}
}
