//go:build linux

package shard

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallDisk mounts a tmpfs of size bytes for the test. Mounting needs the
// same privilege as the local provider's overlay forks, so its absence is
// the "overlay" component's.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	require.NoError(t, os.Mkdir(dir, 0o755))
	testenv.Need(t, testenv.Overlay, func() error {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
			return fmt.Errorf("mount -t tmpfs: %w (needs root or CAP_SYS_ADMIN)", err)
		}
		return nil
	})
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// incompressible is an episode whose steps carry random output, so that
// shards take about as many bytes on disk as the rows hold.
func incompressible(i int) EpisodeBatch {
	id := fmt.Sprintf("ep-%06d", i)
	b := EpisodeBatch{Episode: schemas.EpisodeRow{EpisodeID: id, RunID: testRunID, TaskID: "t", ExitReason: "done", Steps: 4}}
	for s := range 4 {
		out := make([]byte, 16<<10)
		rand.Read(out)
		b.Steps = append(b.Steps, schemas.StepRow{EpisodeID: id, StepIndex: int32(s), TaskID: "t", ActionKind: "exec",
			ActionJSON: `{"kind":"exec","cmd":"head -c 16k /dev/urandom"}`, OutputRaw: out, Output: "binary"})
	}
	return b
}

// A run that fills its disk: the first failed write breaks the Writer, and
// Close still records the run as partial, listing the generations closed
// before, because the reserve it deletes right before the final manifest
// write gives that write its space. The dataset verifies, and a later
// Resume (which frees the lost generation's temporaries) works.
func TestFullDiskStillEndsPartial(t *testing.T) {
	dir := filepath.Join(smallDisk(t, 2<<20), "run")
	m := testManifest()
	m.Summary = []byte(`{"note":"the collector's summary, written with the final manifest"}`)
	w, err := Create(dir, m, Config{RollBytes: 192 << 10, RowGroupBytes: 64 << 10, Compression: "none", RollInterval: time.Hour})
	require.NoError(t, err)
	if fi, err := os.Stat(filepath.Join(dir, ReserveFile)); assert.NoError(t, err) {
		assert.GreaterOrEqual(t, fi.Size(), int64(reserveHeadroom))
	}

	var commitErr error
	committed := 0
	for i := 0; i < 400 && commitErr == nil; i++ {
		if commitErr = w.Commit(context.Background(), incompressible(i)); commitErr == nil {
			committed++
		}
	}
	require.Error(t, commitErr, "the disk never filled")
	assert.True(t, errors.Is(commitErr, syscall.ENOSPC) || errors.Is(commitErr, ErrBroken), "%v", commitErr)
	assert.ErrorIs(t, w.Commit(context.Background(), incompressible(1000)), ErrBroken)
	// The collector writes its summary at the end, on a full disk.
	require.NoError(t, w.Update(func(m *Manifest) { m.Summary = []byte(`{"episodes": 400, "stopped": "disk full"}`) }))
	closeErr := w.Close(StatusComplete)
	require.ErrorIs(t, closeErr, ErrBroken)

	d, err := Open(dir)
	require.NoError(t, err)
	got := d.Manifest()
	assert.Equal(t, StatusPartial, got.Status, "the final manifest was written")
	assert.JSONEq(t, `{"episodes": 400, "stopped": "disk full"}`, string(got.Summary))
	kept := got.Counts[schemas.TableEpisodes]
	assert.Greater(t, kept, int64(0), "generations closed before the disk filled are kept")
	assert.Less(t, kept, int64(committed), "the open generation is lost")
	_, err = os.Stat(filepath.Join(dir, ReserveFile))
	assert.ErrorIs(t, err, os.ErrNotExist, "a closed run keeps no reserve")
	rep, err := Verify(dir)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "problems: %v", rep.Problems)
	assert.Len(t, collect(t, d.Episodes()), int(kept))

	w, err = Resume(dir, smallConfig())
	require.NoError(t, err, "Resume deletes the lost generation and reserves anew")
	assert.NotEmpty(t, w.Removed())
	assert.Len(t, w.Committed(), int(kept))
	require.NoError(t, w.Close(StatusPartial))
}

// The reserve grows with the manifest, so the final write always fits.
func TestReserveCoversTheManifest(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	commitRange(t, w, 0, 200)
	require.NoError(t, w.Roll())
	mi, err := os.Stat(filepath.Join(dir, ManifestFile))
	require.NoError(t, err)
	ri, err := os.Stat(filepath.Join(dir, ReserveFile))
	require.NoError(t, err)
	assert.Greater(t, len(w.Manifest().Shards), 40)
	assert.GreaterOrEqual(t, ri.Size(), 2*mi.Size(), "reserve %d for a manifest of %d", ri.Size(), mi.Size())
	require.NoError(t, w.Close(StatusComplete))
	_, err = os.Stat(filepath.Join(dir, ReserveFile))
	assert.ErrorIs(t, err, os.ErrNotExist)
}
