package shard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/require"
)

const testRunID = "run-test"

func ptr[T any](v T) *T { return &v }

func blobOf(media string, data []byte) schemas.BlobRow {
	sum := sha256.Sum256(data)
	return schemas.BlobRow{SHA256: hex.EncodeToString(sum[:]), Media: media, Data: data}
}

// sharedBlob is referenced by many episodes, to exercise deduplication.
var sharedBlob = blobOf("image/png", []byte("\x89PNG shared screenshot"))

// makeBatch builds episode i of a run with varied rows: optional fields
// nil or set, empty and non-empty lists, invalid UTF-8 output with raw
// bytes, inline and hashed screenshots, episode- and step-level rewards.
func makeBatch(runID string, i int) EpisodeBatch {
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	id := fmt.Sprintf("ep-%06d", i)
	nSteps := rng.IntN(6)
	b := EpisodeBatch{Episode: schemas.EpisodeRow{
		EpisodeID: id, RunID: runID, TaskID: fmt.Sprintf("task-%d", i%7), TaskHash: "th" + fmt.Sprint(i%7),
		Repeat: int32(i % 3), Seed: int64(i) * 1000003, Replica: int32(i % 4), Attempt: 1 + int32(i%2),
		Provider: "local", GoldenID: "g1", ResetStrategy: "fork", ResetOrigin: "overlay",
		ResetMS: 0.25 + float64(i), GoldenBuildMS: 12.5, GoldenBytes: 4096,
		ExitReason: []string{"done", "max_steps", "timeout", "policy_error"}[i%4],
		Detail:     []string{"", "boom"}[i%2], Answer: fmt.Sprintf("answer %d", i),
		Steps: int32(nSteps), StartedAt: 1_700_000_000_000 + int64(i), DurationMS: 1.5 * float64(i),
		PolicyMS: 1, EnvMS: 2, VerifyMS: 3, TokenDrift: i%5 == 0,
	}}
	for s := range nSteps {
		st := schemas.StepRow{
			EpisodeID: id, StepIndex: int32(s), TaskID: b.Episode.TaskID, StartedAt: b.Episode.StartedAt + int64(s),
			ActionKind: "exec", ActionJSON: fmt.Sprintf(`{"kind":"exec","cmd":"echo %d"}`, s),
			Output: fmt.Sprintf("out %d/%d ✓", i, s), OutputBytes: int64(10 + s), ExitCode: int32(s % 2),
			IsError: s%2 == 1, PolicyMS: 0.5, EnvMS: 1.25,
		}
		if s%2 == 1 {
			st.ErrorKind = "exit_status"
		}
		if rng.IntN(4) == 0 { // not valid UTF-8: exact bytes kept
			st.OutputRaw = []byte{0xff, 0xfe, byte(s), 'x'}
			st.Output = "\uFFFD\uFFFDx"
			st.Truncated = true
		}
		switch rng.IntN(4) {
		case 0: // inline screenshot
			png := []byte(fmt.Sprintf("\x89PNG inline %d/%d", i, s))
			sum := sha256.Sum256(png)
			st.Screenshot, st.ScreenHash, st.ScreenW, st.ScreenH = png, hex.EncodeToString(sum[:]), 1280, 800
			st.AXTree = `{"role":"button","name":"Save"}`
		case 1: // hashed screenshot, payload in the blobs table
			bl := sharedBlob
			if rng.IntN(2) == 0 {
				bl = blobOf("image/png", []byte(fmt.Sprintf("\x89PNG blob %d/%d", i, s)))
			}
			b.Blobs = append(b.Blobs, bl)
			st.ScreenHash, st.ScreenW, st.ScreenH = bl.SHA256, 640, 480
		}
		if rng.IntN(3) != 0 { // a model turn
			st.Model = ptr("m-1")
			st.ModelText = ptr(fmt.Sprintf("I will run echo %d", s))
			if rng.IntN(2) == 0 {
				st.Reasoning = ptr("think")
			}
			st.FinishReason = ptr("stop")
			n := 1 + rng.IntN(8)
			st.PromptIDs = []int32{1, 2, 3, int32(i)}
			for k := range n {
				st.ResponseIDs = append(st.ResponseIDs, int32(100+k))
				st.ResponseMask = append(st.ResponseMask, 1)
			}
			if rng.IntN(2) == 0 {
				for k := range n {
					st.ResponseLogprobs = append(st.ResponseLogprobs, -float32(k)/8)
				}
			}
			st.PromptTokens, st.CompletionTokens, st.ModelMS = ptr(int32(4)), ptr(int32(n)), ptr(12.5)
		}
		b.Steps = append(b.Steps, st)
	}
	if i%2 == 0 { // an assembled token record on the episode row
		b.Episode.PromptIDs = []int32{1, 2, 3}
		b.Episode.ResponseIDs = []int32{100, 7, 101}
		b.Episode.ResponseMask = []int32{1, 0, 1}
		if i%4 == 0 {
			b.Episode.ResponseLogprobs = []float32{-0.5, 0, -0.25}
		}
	}
	b.Rewards = append(b.Rewards, schemas.RewardRow{EpisodeID: id, Name: "verify", Source: "test -f ok", ExitCode: int32(i % 2)})
	if i%3 != 0 {
		b.Rewards[0].Value = ptr(float64(i%2) * 1.0)
	}
	if nSteps > 1 {
		b.Rewards = append(b.Rewards, schemas.RewardRow{EpisodeID: id, StepIndex: ptr(int32(nSteps - 1)), Name: "shaped", Value: ptr(0.5), Detail: "tail"})
	}
	return b
}

// normStep maps empty slices to nil: Parquet does not keep the difference.
func normStep(s schemas.StepRow) schemas.StepRow {
	for _, p := range []*[]byte{&s.OutputRaw, &s.Screenshot} {
		if len(*p) == 0 {
			*p = nil
		}
	}
	for _, p := range []*[]int32{&s.PromptIDs, &s.ResponseIDs, &s.ResponseMask} {
		if len(*p) == 0 {
			*p = nil
		}
	}
	if len(s.ResponseLogprobs) == 0 {
		s.ResponseLogprobs = nil
	}
	return s
}

// normEpisode maps empty token lists to nil.
func normEpisode(e schemas.EpisodeRow) schemas.EpisodeRow {
	for _, p := range []*[]int32{&e.PromptIDs, &e.ResponseIDs, &e.ResponseMask} {
		if len(*p) == 0 {
			*p = nil
		}
	}
	if len(e.ResponseLogprobs) == 0 {
		e.ResponseLogprobs = nil
	}
	return e
}

func normEpisodes(in []schemas.EpisodeRow) []schemas.EpisodeRow {
	out := make([]schemas.EpisodeRow, len(in))
	for i := range in {
		out[i] = normEpisode(in[i])
	}
	return out
}

func normSteps(in []schemas.StepRow) []schemas.StepRow {
	out := make([]schemas.StepRow, len(in))
	for i := range in {
		out[i] = normStep(in[i])
	}
	return out
}

func collect[T any](t *testing.T, seq func(func(T, error) bool)) []T {
	t.Helper()
	var out []T
	for row, err := range seq {
		require.NoError(t, err)
		out = append(out, row)
	}
	return out
}

func testManifest() Manifest {
	return Manifest{RunID: testRunID, ToolVersion: "test", Provider: []byte(`{"name":"local"}`), Plan: []byte(`{"episodes":3}`)}
}

// smallConfig rolls often so that tests see many generations.
func smallConfig() Config {
	return Config{RollBytes: 16 << 10, RowGroupBytes: 4 << 10, RollInterval: time.Hour}
}

func commitRange(t *testing.T, w *Writer, from, to int) []EpisodeBatch {
	t.Helper()
	var out []EpisodeBatch
	for i := from; i < to; i++ {
		b := makeBatch(testRunID, i)
		require.NoError(t, w.Commit(context.Background(), b))
		out = append(out, b)
	}
	return out
}

// expected flattens batches into the rows a reader should return.
func expected(batches []EpisodeBatch) (eps []schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) {
	for _, b := range batches {
		eps = append(eps, normEpisode(b.Episode))
		steps = append(steps, normSteps(b.Steps)...)
		rewards = append(rewards, b.Rewards...)
	}
	return eps, steps, rewards
}

func episodeIDs(batches []EpisodeBatch) []string {
	var ids []string
	for _, b := range batches {
		ids = append(ids, b.Episode.EpisodeID)
	}
	slices.Sort(ids)
	return ids
}
