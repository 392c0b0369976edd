package export

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	}))
}

// The experiment at the export level: single bytes flipped across
// each kind of shard, and 64 bytes garbled. Every export either is refused
// as bad input with shard.ErrCorrupt naming the file, writing nothing, or
// (a target that never reads the damaged shard: jsonl carries blob hashes,
// not blob bytes) writes exactly what the undamaged run gives. Never other
// data with success, never a panic.
func TestCorruptShardRefusedByExport(t *testing.T) {
	f := newFixture(t)
	ds, err := shard.Open(f.runA)
	require.NoError(t, err)
	targets := []string{"jsonl", "hf", "verl-sft"}
	exportOf := func(t *testing.T, run, target string) (map[string]string, string, error) {
		parent := t.TempDir()
		out := filepath.Join(parent, "out")
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("-to %s panicked: %v", target, p)
				}
			}()
			_, err = Run(t.Context(), Options{Inputs: []string{run}, Target: target, Out: out})
		}()
		if err != nil {
			return nil, parent, err
		}
		if target == "jsonl" {
			data, rerr := os.ReadFile(out)
			require.NoError(t, rerr)
			return map[string]string{"": sha(data)}, parent, nil
		}
		return hashTree(t, out), parent, nil
	}
	clean := map[string]map[string]string{}
	for _, target := range targets {
		run := filepath.Join(t.TempDir(), "run-a")
		copyDir(t, f.runA, run)
		tree, _, err := exportOf(t, run, target)
		require.NoError(t, err)
		clean[target] = tree
	}
	for _, table := range schemas.Tables {
		victims := ds.Shards(table)
		require.NotEmpty(t, victims, table)
		victim := victims[0]
		pristine, err := os.ReadFile(filepath.Join(f.runA, victim.File))
		require.NoError(t, err)
		n := len(pristine)
		spoils := map[string]func([]byte){}
		for _, off := range []int{0, n / 3, n / 2, 2 * n / 3, n - 9, n - 1} {
			spoils[fmt.Sprintf("flip@%d", off)] = func(b []byte) { b[off] ^= 0x40 }
		}
		spoils["garble64"] = func(b []byte) {
			for i := range 64 {
				b[n/2-32+i] = byte(255 - i)
			}
		}
		for name, spoil := range spoils {
			t.Run(table+"/"+name, func(t *testing.T) {
				run := filepath.Join(t.TempDir(), "run-a")
				copyDir(t, f.runA, run)
				data := append([]byte(nil), pristine...)
				spoil(data)
				require.NoError(t, os.WriteFile(filepath.Join(run, victim.File), data, 0o644))
				for _, target := range targets {
					tree, parent, err := exportOf(t, run, target)
					if err == nil {
						assert.Equal(t, clean[target], tree, "-to %s exported a damaged %s as other data with success", target, victim.File)
						continue
					}
					assert.ErrorIs(t, err, shard.ErrCorrupt, target)
					assert.ErrorIs(t, err, ErrBadInput, target)
					assert.ErrorContains(t, err, victim.File, target)
					assert.Empty(t, dirNames(t, parent), "-to %s left something behind", target)
				}
			})
		}
	}
}
