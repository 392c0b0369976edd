package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDuplicateRefused(t *testing.T) {
	w, err := Create(t.TempDir(), testManifest(), smallConfig())
	require.NoError(t, err)
	defer w.Close(StatusPartial)
	b := makeBatch(testRunID, 1)
	require.NoError(t, w.Commit(context.Background(), b))
	err = w.Commit(context.Background(), b)
	assert.ErrorIs(t, err, ErrDuplicate, "in the open generation")
	assert.ErrorContains(t, err, "ep-000001")
	require.NoError(t, w.Roll())
	assert.ErrorIs(t, w.Commit(context.Background(), b), ErrDuplicate, "in a closed generation")
	assert.Equal(t, map[string]bool{"ep-000001": true}, w.Committed())
}

func TestInvalidBatchRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(b *EpisodeBatch)
		want   string
	}{
		{"empty episode id", func(b *EpisodeBatch) { b.Episode.EpisodeID = "" }, "episode_id is empty"},
		{"other run", func(b *EpisodeBatch) { b.Episode.RunID = "other" }, `run_id "other"`},
		{"episode token record", func(b *EpisodeBatch) { b.Episode.ResponseIDs = []int32{1} }, "episode row: len(response_mask) = 0, len(response_ids) = 1"},
		{"steps count", func(b *EpisodeBatch) { b.Episode.Steps++ }, "steps = 4, but the batch has 3 step rows"},
		{"step of another episode", func(b *EpisodeBatch) { b.Steps[1].EpisodeID = "x" }, `step 1: episode_id "x"`},
		{"step index gap", func(b *EpisodeBatch) { b.Steps[2].StepIndex = 3 }, "step row 2: step_index 3"},
		{"mask length", func(b *EpisodeBatch) { b.Steps[1].ResponseMask = b.Steps[1].ResponseMask[:1] }, "step 1: len(response_mask) = 1, len(response_ids) = 2"},
		{"logprobs length", func(b *EpisodeBatch) { b.Steps[0].ResponseLogprobs = []float32{-1} }, "step 0: len(response_logprobs) = 1, len(response_ids) = 2"},
		{"reward of another episode", func(b *EpisodeBatch) { b.Rewards[0].EpisodeID = "y" }, `reward 0 ("verify"): episode_id "y"`},
		{"reward step out of range", func(b *EpisodeBatch) { b.Rewards[0].StepIndex = ptr(int32(3)) }, "step_index 3, but the episode's own steps are 0..2"},
		{"reward without name", func(b *EpisodeBatch) { b.Rewards[0].Name = "" }, "reward 0: name is empty"},
		{"blob hash", func(b *EpisodeBatch) { b.Blobs[0].Data = []byte("changed") }, "blob 0: sha256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Create(t.TempDir(), testManifest(), smallConfig())
			require.NoError(t, err)
			defer w.Close(StatusPartial)
			b := validBatch()
			require.NoError(t, b.Validate(testRunID))
			tc.modify(&b)
			err = w.Commit(context.Background(), b)
			require.ErrorIs(t, err, ErrInvalidBatch)
			assert.ErrorContains(t, err, tc.want)
			require.NoError(t, w.Roll())
			assert.Empty(t, w.Manifest().Shards, "nothing of an invalid batch is written")
		})
	}
}

// validBatch has three steps with two model tokens each, a reward and a blob.
func validBatch() EpisodeBatch {
	b := EpisodeBatch{Episode: schemas.EpisodeRow{EpisodeID: "e", RunID: testRunID, Steps: 3}}
	for i := range 3 {
		b.Steps = append(b.Steps, schemas.StepRow{EpisodeID: "e", StepIndex: int32(i),
			ResponseIDs: []int32{1, 2}, ResponseMask: []int32{1, 1}})
	}
	b.Rewards = []schemas.RewardRow{{EpisodeID: "e", Name: "verify", Value: ptr(1.0)}}
	b.Blobs = []schemas.BlobRow{blobOf("text/plain", []byte("payload"))}
	return b
}

func TestCreateRefusesExistingDataset(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	_, err = Create(dir, testManifest(), smallConfig())
	assert.ErrorIs(t, err, ErrLocked, "a live writer holds the directory")
	require.NoError(t, w.Close(StatusComplete))

	_, err = Create(dir, testManifest(), smallConfig())
	require.ErrorIs(t, err, ErrExists)
	assert.ErrorContains(t, err, "use -resume")
	assert.ErrorContains(t, err, "-force to start over")

	stray := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(stray, "steps"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(stray, "steps", "part-00000.parquet"), nil, 0o644))
	_, err = Create(stray, testManifest(), smallConfig())
	assert.ErrorIs(t, err, ErrExists, "shard files without a manifest")

	_, err = Create(t.TempDir(), Manifest{}, smallConfig())
	assert.ErrorContains(t, err, "run id")
}

func TestResumeRefusesLiveWriterAndMissingShard(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	commitRange(t, w, 0, 5)
	require.NoError(t, w.Roll())
	_, err = Resume(dir, smallConfig())
	assert.ErrorIs(t, err, ErrLocked)
	require.NoError(t, w.Close(StatusPartial))

	_, err = Resume(t.TempDir(), smallConfig())
	assert.ErrorIs(t, err, ErrNoDataset)

	shard := w.Manifest().Shards[0]
	require.NoError(t, os.Truncate(filepath.Join(dir, shard.File), 10))
	_, err = Resume(dir, smallConfig())
	require.ErrorIs(t, err, ErrCorrupt)
	assert.ErrorContains(t, err, shard.File)
}

func TestUnknownSchemaVersionRefused(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	require.NoError(t, w.Close(StatusComplete))

	path := filepath.Join(dir, ManifestFile)
	var raw map[string]any
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &raw))
	raw["schema_version"] = schemas.Version + 1
	data, err = json.Marshal(raw)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))

	_, err = Open(dir)
	require.ErrorIs(t, err, ErrSchemaVersion)
	assert.ErrorContains(t, err, fmt.Sprintf("schema version %d", schemas.Version+1))
	_, err = Resume(dir, smallConfig())
	assert.ErrorIs(t, err, ErrSchemaVersion)
	_, err = Verify(dir)
	assert.ErrorIs(t, err, ErrSchemaVersion)
}

func TestVerifyFindsDamage(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	commitRange(t, w, 0, 50)
	require.NoError(t, w.Close(StatusComplete))
	m := w.Manifest()

	// Flip one byte in the middle of a shard: same size, other hash.
	victim := m.Shards[0]
	path := filepath.Join(dir, victim.File)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	data[len(data)/2] ^= 0xff
	require.NoError(t, os.WriteFile(path, data, 0o644))

	rep, err := Verify(dir)
	require.NoError(t, err)
	require.False(t, rep.OK())
	assert.Contains(t, rep.Problems[0], victim.File)
	assert.Contains(t, rep.Problems[0], "sha256")
}

func TestClosedWriter(t *testing.T) {
	w, err := Create(t.TempDir(), testManifest(), smallConfig())
	require.NoError(t, err)
	assert.ErrorContains(t, w.Close("running"), "status")
	require.NoError(t, w.Close(StatusPartial))
	assert.ErrorIs(t, w.Commit(context.Background(), makeBatch(testRunID, 1)), ErrClosed)
	assert.ErrorIs(t, w.Roll(), ErrClosed)
	assert.ErrorIs(t, w.Update(func(*Manifest) {}), ErrClosed)
}

func TestCommitHonoursContext(t *testing.T) {
	w, err := Create(t.TempDir(), testManifest(), smallConfig())
	require.NoError(t, err)
	defer w.Close(StatusPartial)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, w.Commit(ctx, makeBatch(testRunID, 1)), context.Canceled)
}

func TestRollInterval(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), Config{RollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	defer w.Close(StatusComplete)
	require.NoError(t, w.Commit(context.Background(), makeBatch(testRunID, 1)))
	// No further Commit comes: the ticker must close the generation.
	assert.Eventually(t, func() bool { return len(w.Committed()) == 1 }, 10*time.Second, 5*time.Millisecond)
	d, err := Open(dir)
	require.NoError(t, err)
	assert.Equal(t, []int{0}, d.Manifest().Generations())
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	require.NoError(t, Config{}.Validate(), "zero fields take defaults")
	assert.ErrorContains(t, Config{Compression: "lz5"}.Validate(), `unknown compression "lz5"`)
	assert.ErrorContains(t, Config{RollBytes: -1}.Validate(), "negative")
	assert.ErrorContains(t, Config{RollInterval: -time.Second}.Validate(), "negative")
	assert.ErrorContains(t, Config{RowGroupBytes: -1}.Validate(), "negative")
	for _, c := range []string{"zstd", "snappy", "none"} {
		dir := t.TempDir()
		w, err := Create(dir, testManifest(), Config{Compression: c})
		require.NoError(t, err)
		commitRange(t, w, 0, 3)
		require.NoError(t, w.Close(StatusComplete))
		rep, err := Verify(dir)
		require.NoError(t, err)
		assert.True(t, rep.OK(), "%s: %v", c, rep.Problems)
	}
}

func TestWriteErrorBreaksWriter(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	noRewards := validBatch()
	noRewards.Rewards = nil
	require.NoError(t, w.Commit(context.Background(), noRewards))
	require.NoError(t, w.Roll())

	// The rewards directory vanishes: the next shard file cannot be created.
	require.NoError(t, os.Remove(filepath.Join(dir, schemas.TableRewards)))
	b := makeBatch(testRunID, 1)
	err = w.Commit(context.Background(), b)
	require.Error(t, err)
	assert.ErrorContains(t, err, "is lost")
	assert.ErrorIs(t, w.Commit(context.Background(), makeBatch(testRunID, 2)), ErrBroken)
	assert.ErrorIs(t, w.Close(StatusComplete), ErrBroken)

	d, err := Open(dir)
	require.NoError(t, err)
	assert.Equal(t, StatusPartial, d.Manifest().Status, "a broken writer never claims completeness")
	assert.Equal(t, int64(1), d.Manifest().Counts[schemas.TableEpisodes])
	rep, err := Verify(dir)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "problems: %v", rep.Problems)
}
