package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// treeHashes maps every file under dir (relative, slash-separated) to the
// sha256 of its content; directories map to "dir", symbolic links to their
// target. Two equal maps mean
// nothing under dir changed.
func treeHashes(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			out[rel+"/"] = "dir"
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			out[rel] = "symlink to " + target
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	}))
	return out
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	}))
}

// readOutcome is what one reader made of a dataset: a digest of everything
// it read, or the error it stopped with, or the panic it raised.
type readOutcome struct {
	digest string
	err    error
	panic  any
}

// readers are the ways export, replay, merge and the collector read a
// dataset. Each returns a digest of all it read, so that a read of a
// damaged dataset that succeeds can be compared with the original.
var readers = map[string]func(dir string) (string, error){
	"EachEpisode": func(dir string) (string, error) {
		d, err := Open(dir)
		if err != nil {
			return "", err
		}
		h := sha256.New()
		err = d.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
			return json.NewEncoder(h).Encode([]any{ep, steps, rewards})
		})
		return hex.EncodeToString(h.Sum(nil)), err
	},
	"tables": func(dir string) (string, error) {
		d, err := Open(dir)
		if err != nil {
			return "", err
		}
		h := sha256.New()
		enc := json.NewEncoder(h)
		for r, err := range d.Episodes() {
			if err != nil {
				return "", err
			}
			enc.Encode(r)
		}
		for r, err := range d.Steps() {
			if err != nil {
				return "", err
			}
			enc.Encode(r)
		}
		for r, err := range d.Rewards() {
			if err != nil {
				return "", err
			}
			enc.Encode(r)
		}
		for r, err := range d.Blobs() {
			if err != nil {
				return "", err
			}
			enc.Encode(r)
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	},
	"Blob": func(dir string) (string, error) {
		d, err := Open(dir)
		if err != nil {
			return "", err
		}
		// Look up every blob the steps refer to, as replay and export do.
		h := sha256.New()
		for st, err := range d.Steps() {
			if err != nil {
				return "", err
			}
			if st.ScreenHash == "" || len(st.Screenshot) > 0 {
				continue
			}
			data, err := d.Blob(st.ScreenHash)
			if err != nil {
				return "", err
			}
			h.Write(data)
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	},
}

func readSafely(fn func(string) (string, error), dir string) (out readOutcome) {
	defer func() {
		if p := recover(); p != nil {
			out.panic = p
		}
	}()
	out.digest, out.err = fn(dir)
	return out
}

// corruptionFixture writes a run with every table in several generations.
func corruptionFixture(t *testing.T) (string, Manifest) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	w, err := Create(dir, testManifest(), Config{RollBytes: 64 << 10, RowGroupBytes: 4 << 10, RollInterval: time.Hour})
	require.NoError(t, err)
	commitRange(t, w, 0, 60)
	require.NoError(t, w.Close(StatusComplete))
	m := w.Manifest()
	for _, table := range schemas.Tables {
		require.NotEmpty(t, (&Dataset{m: m}).Shards(table), "the fixture needs a %s shard", table)
	}
	return dir, m
}

// damage is one way to spoil a shard's bytes.
type damage struct {
	name  string
	apply func(data []byte)
}

// damages flips single bytes at offsets spread over the whole file (the
// header magic, pages, the footer and its length) and garbles 64-byte runs.
func damages(size int) []damage {
	var out []damage
	offsets := []int{0, 1, 3, 4, 5, 8, 16, 32, 64, 100, size - 1, size - 2, size - 4, size - 5, size - 8, size - 9, size - 16, size - 40, size - 100}
	for i := 1; i < 12; i++ {
		offsets = append(offsets, size*i/12)
	}
	slices.Sort(offsets)
	offsets = slices.Compact(offsets)
	for _, off := range offsets {
		if off < 0 || off >= size {
			continue
		}
		out = append(out, damage{fmt.Sprintf("flip@%d", off), func(data []byte) { data[off] ^= 0x01 }})
	}
	for _, off := range []int{size / 3, size / 2, size - 200} {
		if off < 0 || off+64 > size {
			continue
		}
		out = append(out, damage{fmt.Sprintf("garble64@%d", off), func(data []byte) {
			for i := range 64 {
				data[off+i] = byte(i*37 + 11)
			}
		}})
	}
	return out
}

// The experiment: flip single bytes at many offsets of each kind of
// shard and garble 64 bytes. Every read that export, replay, merge or a
// resume makes is refused with ErrCorrupt naming the file, or returns
// exactly what the undamaged dataset gives; it never returns other data,
// and never panics. Resume refuses and changes no file; Verify reports the
// file.
func TestCorruptShardNeverReadsAsOtherData(t *testing.T) {
	orig, m := corruptionFixture(t)
	want := map[string]string{}
	for name, fn := range readers {
		r := readSafely(fn, orig)
		require.NoError(t, r.err, name)
		require.Nil(t, r.panic, name)
		want[name] = r.digest
	}
	var victims []ShardInfo
	for _, table := range schemas.Tables {
		victims = append(victims, (&Dataset{m: m}).Shards(table)[0])
	}
	cases := 0
	for _, victim := range victims {
		clean, err := os.ReadFile(filepath.Join(orig, victim.File))
		require.NoError(t, err)
		for _, dmg := range damages(len(clean)) {
			t.Run(victim.Table+"/"+dmg.name, func(t *testing.T) {
				cases++
				dir := filepath.Join(t.TempDir(), "run")
				copyTree(t, orig, dir)
				data := slices.Clone(clean)
				dmg.apply(data)
				require.NoError(t, os.WriteFile(filepath.Join(dir, victim.File), data, 0o644))

				for name, fn := range readers {
					r := readSafely(fn, dir)
					require.Nil(t, r.panic, "%s panicked: %v", name, r.panic)
					if r.err != nil {
						assert.ErrorIs(t, r.err, ErrCorrupt, name)
						assert.ErrorContains(t, r.err, victim.File, "%s: the error names the file", name)
						continue
					}
					assert.Equal(t, want[name], r.digest, "%s read a damaged %s as other data with success", name, victim.File)
				}

				before := treeHashes(t, dir)
				w, err := Resume(dir, smallConfig())
				if err == nil {
					w.Close(StatusPartial)
				}
				require.ErrorIs(t, err, ErrCorrupt, "Resume accepted a shard that does not match its sha256")
				assert.ErrorContains(t, err, victim.File)
				assert.Equal(t, before, treeHashes(t, dir), "a refused Resume changed files")

				rep, err := Verify(dir)
				require.NoError(t, err)
				require.False(t, rep.OK())
				assert.Contains(t, fmt.Sprint(rep.Problems), victim.File)
			})
		}
	}
	assert.Greater(t, cases, 100, "the experiment covers many offsets of every kind of shard")
}

// A manifest edited by hand: another run id, another shard hash, another
// size or row count. Readers notice each.
func TestEditedManifestNoticed(t *testing.T) {
	orig, m := corruptionFixture(t)
	steps := (&Dataset{m: m}).Shards(schemas.TableSteps)[0]
	for _, tc := range []struct {
		name string
		edit func(m *Manifest)
		want string
	}{
		{"run_id", func(m *Manifest) { m.RunID = "run-other" }, schemas.MetaRunID},
		{"sha256", func(m *Manifest) {
			for i := range m.Shards {
				if m.Shards[i].File == steps.File {
					m.Shards[i].SHA256 = "00" + m.Shards[i].SHA256[2:]
				}
			}
		}, "sha256"},
		{"bytes", func(m *Manifest) {
			for i := range m.Shards {
				if m.Shards[i].File == steps.File {
					m.Shards[i].Bytes++
				}
			}
		}, "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			copyTree(t, orig, dir)
			edited := m.Clone()
			tc.edit(&edited)
			data, err := json.MarshalIndent(edited, "", "  ")
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), data, 0o644))

			for name, fn := range readers {
				r := readSafely(fn, dir)
				require.Nil(t, r.panic, name)
				require.ErrorIs(t, r.err, ErrCorrupt, name)
				assert.ErrorContains(t, r.err, tc.want, name)
			}
			before := treeHashes(t, dir)
			_, err = Resume(dir, smallConfig())
			require.ErrorIs(t, err, ErrCorrupt)
			assert.Equal(t, before, treeHashes(t, dir))
			rep, err := Verify(dir)
			require.NoError(t, err)
			assert.False(t, rep.OK())
		})
	}
}

// EachEpisodeRewards refuses a damaged episodes or rewards shard, naming
// it, and, never reading the steps table, gives the same rows whatever
// happened to a steps shard.
func TestEachEpisodeRewardsReadsNoSteps(t *testing.T) {
	orig, m := corruptionFixture(t)
	read := func(dir string) (string, error) {
		d, err := Open(dir)
		if err != nil {
			return "", err
		}
		h := sha256.New()
		err = d.EachEpisodeRewards(func(ep schemas.EpisodeRow, rewards []schemas.RewardRow) error {
			return json.NewEncoder(h).Encode([]any{ep, rewards})
		})
		return hex.EncodeToString(h.Sum(nil)), err
	}
	want, err := read(orig)
	require.NoError(t, err)
	for _, table := range []string{schemas.TableEpisodes, schemas.TableRewards, schemas.TableSteps} {
		victim := (&Dataset{m: m}).Shards(table)[0]
		dir := filepath.Join(t.TempDir(), "run")
		copyTree(t, orig, dir)
		data, err := os.ReadFile(filepath.Join(dir, victim.File))
		require.NoError(t, err)
		data[len(data)/2] ^= 1
		require.NoError(t, os.WriteFile(filepath.Join(dir, victim.File), data, 0o644))
		got, err := read(dir)
		if table == schemas.TableSteps {
			require.NoError(t, err)
			assert.Equal(t, want, got)
			continue
		}
		assert.ErrorIs(t, err, ErrCorrupt, table)
		assert.ErrorContains(t, err, victim.File)
	}
}
