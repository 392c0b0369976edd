package inspect

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

func TestSummarize(t *testing.T) {
	dir := writeFixture(t)
	s, err := Summarize(t.Context(), dir, Options{})
	require.NoError(t, err)

	assert.Equal(t, shard.StatusComplete, s.Status)
	assert.Equal(t, "run-fixture", s.RunID)
	assert.Empty(t, s.Problems)
	assert.Equal(t, &manifest.Plan{Repeats: 3, Seed: 7, Replicas: 4, Reset: "auto", Episodes: 6, Part: manifest.Part{Index: 0, Count: 1}, Total: 6}, s.Plan)
	assert.Equal(t, &manifest.Provider{Name: "local", Params: map[string]string{"fork": "copy"}, Reset: "fork"}, s.Provider)
	assert.Equal(t, "openai", s.Policy.Name)
	assert.Equal(t, "m", s.Policy.Options["model"])
	assert.Equal(t, fixturePolicy.Conversation, s.Policy.Conversation, "the conversation reads back whatever its settings' JSON types")
	assert.Equal(t, map[string]string{"text": "full", "pixels": "hash", "a11y": "full", "tokens": "keep"}, s.Capture)

	assert.EqualValues(t, 6, s.Episodes)
	assert.EqualValues(t, 8, s.Steps)
	assert.Equal(t, map[string]int{"done": 4, "max_steps": 1, "env_error": 1}, s.ByExit)
	assert.Equal(t, 1, s.Losses, "env_error is a scaffold loss")
	require.Len(t, s.Tasks, 2)
	gui, shell := s.Tasks[0], s.Tasks[1]
	assert.Equal(t, "gui", gui.ID)
	assert.Equal(t, 2, gui.Episodes)
	assert.EqualValues(t, 4, gui.Steps)
	assert.Equal(t, map[string]int{"done": 2}, gui.ByExit)
	assert.InDelta(t, 0.75, *gui.RewardMean, 1e-12)
	assert.Equal(t, "Press the Save button.", gui.Instruction)
	assert.NotEmpty(t, gui.Hash)
	assert.Equal(t, "shell", shell.ID)
	assert.Equal(t, 4, shell.Episodes)
	assert.Equal(t, map[string]int{"done": 2, "max_steps": 1, "env_error": 1}, shell.ByExit)
	assert.Equal(t, 2, shell.Rewarded, "a null reward is not a value")
	assert.Equal(t, map[string]string{"done": "s-done-1", "max_steps": "s-max", "env_error": "s-lost"}, shell.FirstByExit)
	assert.InDelta(t, 0.5, *shell.RewardMean, 1e-12)

	r := s.Reward
	assert.Equal(t, "verify", r.Name)
	assert.Equal(t, 4, r.Count)
	assert.Equal(t, 1, r.Null)
	assert.InDelta(t, 0.625, *r.Mean, 1e-12)
	assert.Equal(t, 0.0, *r.Min)
	assert.Equal(t, 1.0, *r.Max)
	assert.Equal(t, []ValueCount{{0, 1}, {0.5, 1}, {1, 2}}, r.Values)
	assert.Empty(t, r.Histogram)
	assert.Equal(t, []RewardName{{Name: "shaped", EpisodeLevel: 0, StepLevel: 1}}, s.OtherRewards)

	assert.Equal(t, []Latency{
		{Key: "fork/overlay", Strategy: "fork", Origin: "overlay", Latency: manifest.Latency{N: 3, P50: 2, P95: 3}, Exact: true},
		{Key: "recreate/create", Strategy: "recreate", Origin: "create", Latency: manifest.Latency{N: 2, P50: 100, P95: 120}, Exact: true},
	}, s.Reset, "the episode that got no replica (reset 0) is not a latency")
	assert.Equal(t, map[string]float64{"shell": 40, "gui": 40}, s.GoldenBuild)
	assert.Equal(t, Tokens{WithRecord: 2, Drift: 1, Turns: 3}, s.Tokens)

	var total int64
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	for _, table := range schemas.Tables {
		for _, sh := range ds.Shards(table) {
			total += sh.Bytes
		}
	}
	assert.Equal(t, total, s.Bytes.Total)
	assert.InDelta(t, float64(total)/8, s.Bytes.PerStep, 1e-9)
	require.Len(t, s.Bytes.Tables, 4)
	assert.Equal(t, "steps", s.Bytes.Tables[0].Table)
	assert.EqualValues(t, 8, s.Bytes.Tables[0].Rows)
	assert.Greater(t, s.Bytes.Tables[0].Shards, 1, "the fixture spans several generations")

	// Another reward's distribution.
	s, err = Summarize(t.Context(), dir, Options{Reward: "shaped"})
	require.NoError(t, err)
	assert.Equal(t, 0, s.Reward.Count, "shaped is a step-level reward only")
	assert.Contains(t, s.OtherRewards, RewardName{Name: "verify", EpisodeLevel: 5})

	var js Summary
	require.NoError(t, json.Unmarshal(mustJSON(t, s), &js))
	assert.Equal(t, s.Reward, js.Reward, "the JSON form round-trips")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// Past maxDistinctRewards distinct values the distribution is a histogram
// of equal bins over [min, max] whose counts add up to the values.
func TestRewardHistogram(t *testing.T) {
	var batches []shard.EpisodeBatch
	for i := range 50 {
		id := "e" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		v := float64(i) / 49 // 0 .. 1, 50 distinct values
		batches = append(batches, shard.EpisodeBatch{
			Episode: schemas.EpisodeRow{EpisodeID: id, TaskID: "shell", ExitReason: "done"},
			Rewards: []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: &v}},
		})
	}
	dir := writeDataset(t, fixtureManifest(t, "run-hist", "hash"), batches, shard.DefaultConfig())
	s, err := Summarize(t.Context(), dir, Options{})
	require.NoError(t, err)
	r := s.Reward
	assert.Nil(t, r.Values)
	require.Len(t, r.Histogram, histogramBins)
	sum := 0
	for i, b := range r.Histogram {
		sum += b.Count
		assert.InDelta(t, float64(i)/10, b.Low, 1e-12)
		assert.Equal(t, 5, b.Count, "bin %d", i)
	}
	assert.Equal(t, 50, sum)
	assert.Equal(t, 1.0, r.Histogram[len(r.Histogram)-1].High, "the last bin closes at max")
}

func TestTranscript(t *testing.T) {
	dir := writeFixture(t)
	ts, err := Transcripts(t.Context(), dir, []string{"s-done-1"}, TranscriptOptions{})
	require.NoError(t, err)
	require.Len(t, ts, 1)
	tr := ts[0]
	assert.Equal(t, "s-done-1", tr.EpisodeID)
	assert.Equal(t, "shell", tr.TaskID)
	assert.Equal(t, "You are careful.", tr.System)
	assert.Equal(t, "Count the files.\nWrite the count to count.txt.", tr.Instruction)
	assert.Equal(t, 12, tr.ObservationCap)
	assert.Equal(t, "fork/overlay", tr.Reset)
	assert.True(t, tr.TokenRecord)
	assert.Equal(t, "3 files", tr.Answer)
	require.Len(t, tr.Steps, 2)
	st := tr.Steps[0]
	assert.Equal(t, "I will count them.", st.ModelText)
	assert.Equal(t, "ls lists the files.", st.Reasoning)
	assert.Equal(t, "tool_calls", st.FinishReason)
	assert.Equal(t, `{"kind":"exec","cmd":"ls | wc -l > count.txt; cat count.txt"}`, st.Action)
	assert.Equal(t, `{"cmd":"ls | wc -l > count.txt; cat count.txt"}`, string(st.Arguments), "the fields as the model wrote them, > unescaped")

	// The observation is what the model was shown: aci.ObservationText of
	// the step with the run's cap, the rendering policies and exports use.
	row := fixtureEpisodes()[0].Steps[0]
	out := "3\nand a long tail that the cap elides\n"
	want := aci.ObservationText(runtime.Step{
		Action:      runtime.Action{Kind: runtime.ActExec, Cmd: "ls | wc -l > count.txt; cat count.txt"},
		Observation: runtime.Observation{Output: []byte(out), OutputBytes: int64(len(out)), ExitCode: 0},
	}, 12)
	assert.Equal(t, want, st.Observation)
	exported, err := model.ToolResult(&row, 12)
	require.NoError(t, err)
	assert.Equal(t, exported, st.Observation, "the same text the chat exports write")
	assert.Contains(t, st.Observation, "exit code: 0\n")
	assert.Contains(t, st.Observation, "bytes elided", "the run's observation cap applies")

	require.Len(t, st.Rewards, 1)
	assert.Equal(t, "shaped", st.Rewards[0].Name)
	assert.Empty(t, tr.Steps[1].Observation, "done has no observation")
	require.Len(t, tr.Rewards, 2)
	assert.Equal(t, "verify", tr.Rewards[0].Name)
	assert.Equal(t, 1.0, *tr.Rewards[0].Value)

	// Its text: internal/ui (testdata/transcript-fixture.golden).
}

func TestTranscriptPrefixes(t *testing.T) {
	dir := writeFixture(t)
	ts, err := Transcripts(t.Context(), dir, []string{"s-m", "g-d"}, TranscriptOptions{})
	require.NoError(t, err)
	require.Len(t, ts, 2)
	assert.Equal(t, "s-max", ts[0].EpisodeID, "in the order asked")
	assert.Equal(t, "g-done", ts[1].EpisodeID)

	for _, tc := range []struct {
		prefixes []string
		want     string
	}{
		{[]string{"s-done"}, `2 episode ids in ` + dir + ` start with "s-done": s-done-1, s-done-0; give more of the id`},
		{[]string{"zz"}, `no episode id in ` + dir + ` starts with "zz"`},
		{[]string{"g-done", "zz"}, `starts with "zz"`},
		{nil, "no episode id prefix given"},
	} {
		_, err := Transcripts(t.Context(), dir, tc.prefixes, TranscriptOptions{})
		assert.ErrorIs(t, err, ErrNoMatch, "%q", tc.prefixes)
		assert.ErrorContains(t, err, tc.want)
	}
}

func TestScreenshots(t *testing.T) {
	dir := writeFixture(t)
	shots := filepath.Join(t.TempDir(), "shots", "new")
	ts, err := Transcripts(t.Context(), dir, []string{"g-done"}, TranscriptOptions{Screenshots: shots})
	require.NoError(t, err)
	steps := ts[0].Steps
	require.Len(t, steps, 3)
	assert.Equal(t, "row", steps[0].Screenshot.Stored)
	assert.Equal(t, "blob", steps[1].Screenshot.Stored, "pixels=hash: resolved from the blobs table")
	assert.Nil(t, steps[2].Screenshot)
	for i, want := range [][]byte{shotRow, shotBlob} {
		got, err := os.ReadFile(filepath.Join(shots, "g-done-step-00"+string(rune('0'+i))+".png"))
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.Equal(t, filepath.Join(shots, "g-done-step-00"+string(rune('0'+i))+".png"), steps[i].Screenshot.File)
	}
	entries, err := os.ReadDir(shots)
	require.NoError(t, err)
	assert.Len(t, entries, 2)

	// A run that kept no pixels: the hash and size, nothing to write.
	none := writeDataset(t, fixtureManifest(t, "run-none", "none"), []shard.EpisodeBatch{noPixelsEpisode()}, shard.DefaultConfig())
	out := filepath.Join(t.TempDir(), "none")
	ts, err = Transcripts(t.Context(), none, []string{"g-none"}, TranscriptOptions{Screenshots: out})
	require.NoError(t, err)
	assert.Equal(t, "none", ts[0].Steps[0].Screenshot.Stored)
	assert.Empty(t, ts[0].Steps[0].Screenshot.File)
	entries, err = os.ReadDir(out)
	require.NoError(t, err)
	assert.Empty(t, entries)

	// The same step in a run that says it kept pixels by hash: the blob
	// is missing, which is damage.
	lost := writeDataset(t, fixtureManifest(t, "run-lost", "hash"), []shard.EpisodeBatch{noPixelsEpisode()}, shard.DefaultConfig())
	_, err = Transcripts(t.Context(), lost, []string{"g-none"}, TranscriptOptions{})
	assert.ErrorIs(t, err, ErrDamaged)
	assert.ErrorContains(t, err, "is in no blob shard")
}

func TestSummaryOfAnEmptyRun(t *testing.T) {
	dir := writeDataset(t, shard.Manifest{RunID: "empty"}, nil, shard.DefaultConfig())
	s, err := Summarize(t.Context(), dir, Options{})
	require.NoError(t, err)
	assert.Zero(t, s.Episodes)
	assert.Nil(t, s.Plan)
	assert.Zero(t, s.Steps)
	assert.Zero(t, s.Reward.Count)
	assert.Nil(t, s.Reward.Mean, "no mean of no values (the text would say NaN)")
}

// A dataset whose model turns came from two servers and two token paths
// (a run resumed after the server behind its URL was replaced, say) says
// so: the summary counts the turns by source and says the dataset mixes
// them, the cut records say why they were cut, and a transcript names each
// turn's source.
func TestTokenSourcesShowADatasetMixingServers(t *testing.T) {
	tito := func(id string, i int) schemas.StepRow {
		return schemas.StepRow{EpisodeID: id, StepIndex: int32(i), TaskID: "shell", ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"ls"}`,
			Model: ptr("Qwen/Qwen3-8B"), TokenPath: ptr("tito"), TokenEndpoints: ptr("/tokenize,/v1/completions")}
	}
	chat := func(id string, i int) schemas.StepRow {
		return schemas.StepRow{EpisodeID: id, StepIndex: int32(i), TaskID: "shell", ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"ls"}`,
			Model: ptr("llama-3.1-8b"), TokenPath: ptr("chat"), TokenEndpoints: ptr("/v1/chat/completions"),
			ChatTemplateSHA256: ptr("e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65")}
	}
	row := func(id string) schemas.EpisodeRow {
		return schemas.EpisodeRow{EpisodeID: id, TaskID: "shell", ExitReason: "max_steps", Steps: 2, Provider: "local"}
	}
	cut := row("e-chat")
	cut.TokenDrift, cut.TokenCut = true, ptr(schemas.TokenCutMissingIDs)
	dir := writeDataset(t, fixtureManifest(t, "run-mixed", "hash"), []shard.EpisodeBatch{
		{Episode: row("e-tito-1"), Steps: []schemas.StepRow{tito("e-tito-1", 0), tito("e-tito-1", 1)}},
		{Episode: row("e-tito-2"), Steps: []schemas.StepRow{tito("e-tito-2", 0), tito("e-tito-2", 1)}},
		{Episode: cut, Steps: []schemas.StepRow{chat("e-chat", 0), {EpisodeID: "e-chat", StepIndex: 1, TaskID: "shell", ActionKind: "done", ActionJSON: `{"kind":"done"}`}}},
	}, shard.Config{})
	s, err := Summarize(t.Context(), dir, Options{})
	require.NoError(t, err)
	require.Equal(t, []TokenSource{
		{Path: "tito", Endpoints: "/tokenize,/v1/completions", Model: "Qwen/Qwen3-8B", Turns: 4},
		{Path: "chat", Endpoints: "/v1/chat/completions", Model: "llama-3.1-8b", TemplateSHA256: "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65", Turns: 1},
	}, s.Tokens.Sources)
	require.Equal(t, map[string]int{"missing_ids": 1}, s.Tokens.Cut)
	ts, err := Transcripts(t.Context(), dir, []string{"e-chat"}, TranscriptOptions{})
	require.NoError(t, err)
	require.Equal(t, "chat", ts[0].Steps[0].TokenPath)
	require.Equal(t, "/v1/chat/completions", ts[0].Steps[0].TokenEndpoints)
	require.Equal(t, "llama-3.1-8b", ts[0].Steps[0].Model)
	require.Empty(t, ts[0].Steps[1].TokenPath, "a step without a model turn has no source")
}
