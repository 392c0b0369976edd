package shard

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/forkline/forkline/internal/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rewriteShard replaces a listed shard with one whose rows mutate returns,
// written by the writer's own code, and lists it with its true size, hash
// and row count: a dataset whose every hash matches but whose rows break
// an invariant.
func rewriteShard[T any](t *testing.T, dir string, m *Manifest, file string, mutate func([]T) []T) {
	t.Helper()
	i := -1
	for k, s := range m.Shards {
		if s.File == file {
			i = k
		}
	}
	require.GreaterOrEqual(t, i, 0, file)
	s := m.Shards[i]
	rows := collect(t, readShard[T](newSource(dir, m.RunID), s, readBatchRows))
	rows = mutate(rows)
	codec, _ := DefaultConfig().codec()
	f, err := createTableFile[T](dir, s.Table, s.Generation, m.RunID, codec, DefaultRowGroupBytes)
	require.NoError(t, err)
	for k := range rows {
		require.NoError(t, f.write(rows[k:k+1], 1))
	}
	info, err := f.finish()
	require.NoError(t, err)
	m.Counts[s.Table] += info.Rows - s.Rows
	m.Shards[i] = info
	data, err := json.MarshalIndent(m, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), data, 0o644))
}

// Verify checks what the hashes cannot: every episode row carries the
// manifest's run id, each episode's steps count matches its step rows,
// step and reward rows belong to an episode of their generation, and the
// manifest is forkline's. It reports every problem, not the first.
func TestVerifyChecksRowsHashesCannot(t *testing.T) {
	build := func(t *testing.T) (string, Manifest) {
		dir := filepath.Join(t.TempDir(), "run")
		w, err := Create(dir, testManifest(), smallConfig())
		require.NoError(t, err)
		commitRange(t, w, 0, 30)
		require.NoError(t, w.Close(StatusComplete))
		rep, err := Verify(dir)
		require.NoError(t, err)
		require.True(t, rep.OK(), "%v", rep.Problems)
		return dir, w.Manifest()
	}
	firstWith := func(m Manifest, table string) string {
		return (&Dataset{m: m}).Shards(table)[0].File
	}

	t.Run("an episode of another run", func(t *testing.T) {
		dir, m := build(t)
		rewriteShard(t, dir, &m, firstWith(m, schemas.TableEpisodes), func(rows []schemas.EpisodeRow) []schemas.EpisodeRow {
			rows[0].RunID = "run-other"
			return rows
		})
		rep, err := Verify(dir)
		require.NoError(t, err)
		assert.Contains(t, fmt.Sprint(rep.Problems), `has run_id "run-other"`)
	})
	t.Run("a step row missing", func(t *testing.T) {
		dir, m := build(t)
		var victim string
		rewriteShard(t, dir, &m, firstWith(m, schemas.TableSteps), func(rows []schemas.StepRow) []schemas.StepRow {
			victim = rows[len(rows)-1].EpisodeID
			return rows[:len(rows)-1]
		})
		rep, err := Verify(dir)
		require.NoError(t, err)
		assert.Contains(t, fmt.Sprint(rep.Problems), fmt.Sprintf("episode %q has steps =", victim))
		// EachEpisode refuses it as well.
		err = mustOpen(t, dir).EachEpisode(func(schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) error { return nil })
		assert.ErrorIs(t, err, ErrCorrupt)
	})
	t.Run("a reward of no episode, several problems at once", func(t *testing.T) {
		dir, m := build(t)
		rewriteShard(t, dir, &m, firstWith(m, schemas.TableRewards), func(rows []schemas.RewardRow) []schemas.RewardRow {
			rows[0].EpisodeID = "ghost"
			return rows
		})
		// And a listed blobs shard that is gone, and another tool's name.
		blobs := firstWith(m, schemas.TableBlobs)
		require.NoError(t, os.Remove(filepath.Join(dir, blobs)))
		m.Tool = "other"
		data, err := json.MarshalIndent(m, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), data, 0o644))
		rep, err := Verify(dir)
		require.NoError(t, err)
		all := strings.Join(rep.Problems, "\n")
		assert.Contains(t, all, `belong to no episode`)
		assert.Contains(t, all, blobs)
		assert.Contains(t, all, `tool is "other"`)
		assert.Contains(t, all, "table blobs: the shards hold")
	})
	t.Run("leftovers and foreign files are reported, not problems", func(t *testing.T) {
		dir, _ := build(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "steps", ".part-00099.parquet.tmp"), []byte("x"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "steps", "part-00099.parquet"), []byte("x"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "README.txt"), []byte("mine"), 0o644))
		rep, err := Verify(dir)
		require.NoError(t, err)
		assert.True(t, rep.OK(), "%v", rep.Problems)
		assert.ElementsMatch(t, []string{"steps/.part-00099.parquet.tmp", "steps/part-00099.parquet"}, rep.Unlisted)
		assert.Equal(t, []string{"README.txt"}, rep.Foreign)
	})
}

// A shard listed with the hash of its damaged bytes (edited by hand)
// passes the sha256 check; decoding it may then make parquet-go panic,
// which the readers recover and report as ErrCorrupt naming the file.
// Reading it as other data is possible here (the hash vouches for the
// damage); crashing is not.
func TestDecodePanicRecovered(t *testing.T) {
	if raceBuild {
		// Under -race the compiler's pointer checks (checkptr) make some of
		// parquet-go's panics on damaged bytes (unsafe.Slice of a nil
		// pointer) a fatal runtime error, which no recover catches: the
		// property checked here exists only in a build without them, which
		// make test runs. Which damage hits it varies with the fixture's
		// bytes (its timestamps), so it is not a damage to leave out.
		testenv.Inapplicable(t, "a race build turns parquet-go's unsafe.Slice panics into fatal errors, which cannot be recovered (make test runs this)")
	}
	orig, m := corruptionFixture(t)
	recovered := 0
	for _, table := range []string{schemas.TableSteps, schemas.TableRewards} {
		victim := (&Dataset{m: m}).Shards(table)[0]
		clean, err := os.ReadFile(filepath.Join(orig, victim.File))
		require.NoError(t, err)
		for _, dmg := range append(damages(len(clean)), offsetIndexDamages(t, clean)...) {
			dir := filepath.Join(t.TempDir(), "run")
			copyTree(t, orig, dir)
			data := append([]byte(nil), clean...)
			dmg.apply(data)
			require.NoError(t, os.WriteFile(filepath.Join(dir, victim.File), data, 0o644))
			forged := m.Clone()
			sum := sha256.Sum256(data)
			for i := range forged.Shards {
				if forged.Shards[i].File == victim.File {
					forged.Shards[i].SHA256 = hex.EncodeToString(sum[:])
				}
			}
			enc, err := json.MarshalIndent(forged, "", "  ")
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), enc, 0o644))

			for name, fn := range readers {
				r := readSafely(fn, dir)
				require.Nil(t, r.panic, "%s: %s panicked: %v", dmg.name, name, r.panic)
				if r.err != nil {
					// A flip in the footer's metadata may also read as
					// another schema version.
					require.True(t, errors.Is(r.err, ErrCorrupt) || errors.Is(r.err, ErrSchemaVersion), "%s: %s: %v", dmg.name, name, r.err)
					assert.ErrorContains(t, r.err, victim.File)
					if strings.Contains(r.err.Error(), "panicked") {
						recovered++
					}
				}
			}
			w, err := Resume(dir, smallConfig())
			if err == nil {
				require.NoError(t, w.Close(StatusPartial))
			}
		}
	}
	assert.Greater(t, recovered, 0, "no damage made the decoder panic: the recover is not exercised")
}

// offsetIndexDamages flips a byte three quarters into the offset index
// (page locations: offset, size, first row) of each column of the shard's
// first row group, wherever the layout puts it: a page location that
// points into the wrong bytes is what made parquet-go's page decoder panic
// (unsafe.Slice on a nil pointer), found by flipping every byte of a steps
// shard. Fixed offsets found it only while the layout put an offset index
// there (page statistics, since left out, moved it).
func offsetIndexDamages(t *testing.T, clean []byte) []damage {
	t.Helper()
	pf, err := openParquet(bytes.NewReader(clean), int64(len(clean)))
	require.NoError(t, err)
	var out []damage
	for _, c := range pf.Metadata().RowGroups[0].Columns {
		if c.OffsetIndexLength < 4 {
			continue
		}
		off := c.OffsetIndexOffset + int64(c.OffsetIndexLength)*3/4
		out = append(out, damage{fmt.Sprintf("offset-index-flip@%d", off), func(data []byte) { data[off] ^= 0x01 }})
	}
	return out
}

// An episode kept as done whose verifier errored (its reward row holds the
// session's or the stop's error instead of a value) is a problem: a
// trainer would take it as a finished episode without its reward, and a
// resume would not run it again. A verifier that ran and gave no value is
// the task's outcome, not a problem; so is an errored verifier of an
// episode not kept as done. Before the fix verify said ok to both.
func TestVerifyFlagsADoneEpisodeWhoseVerifierErrored(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	batch := func(id, exit, detail string) EpisodeBatch {
		b := makeBatch(testRunID, 0)
		b.Episode.EpisodeID, b.Episode.ExitReason, b.Episode.Steps = id, exit, 0
		b.Steps, b.Blobs = nil, nil
		b.Rewards = []schemas.RewardRow{{EpisodeID: id, Name: "verify", Source: "sh test.sh", Detail: detail}}
		return b
	}
	for _, b := range []EpisodeBatch{
		batch("cut-short", "done", "task: verify: local: exec in sb-7: context canceled"),
		batch("session-failed", "done", "episode: verify: placing the hidden files: docker: container gone"),
		batch("no-number", "done", "verify printed no number\nFAIL"),
		batch("broken", "env_error", "task: verify: local: exec in sb-8: sandbox closed"),
	} {
		require.NoError(t, w.Commit(t.Context(), b))
	}
	require.NoError(t, w.Close(StatusComplete))
	rep, err := Verify(dir)
	require.NoError(t, err)
	require.Len(t, rep.Problems, 2, "%q", rep.Problems)
	require.Contains(t, rep.Problems[0], `episode "cut-short" is kept as done, but its verifier errored (task: verify: local: exec in sb-7: context canceled)`)
	require.Contains(t, rep.Problems[1], `episode "session-failed" is kept as done, but its verifier errored`)
}
