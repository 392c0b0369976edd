// Package record is a run's dataset as the commands that write one —
// collect, serve and replay's -record — open, fill and close it: create a
// new one, resume one (its crash leftovers removed by the writer), or
// replace one forkline wrote; commit each episode with every distinct blob
// once across the run, a resumed dataset's blobs included; close it with a
// status and the command's summary. One set of rules for all three, so a
// directory one command refuses the others refuse too.
//
// It knows the native store (formats/shard), the blob recorder (capture)
// and the manifest's entries. It does not know plans, policies, providers,
// flags or the command line: what may be resumed is decided before Open
// (Mismatches, with the caller's own checks), and errors carry the
// directory, never a flag name.
package record

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/schemas"
)

// Errors Open returns, each wrapped with the directory. Another process
// writing the dataset is shard.CheckFree's error (wrapping
// shard.ErrLocked), as it is.
var (
	// ErrExists: the directory holds a dataset and neither Resume nor
	// Replace was asked for.
	ErrExists = errors.New("the directory holds a dataset")
	// ErrNothingToResume: Resume was asked for and the directory holds no
	// dataset.
	ErrNothingToResume = errors.New("the directory holds no dataset to resume")
	// ErrNotEmpty: the directory holds files and no dataset; nothing in it
	// is forkline's to replace.
	ErrNotEmpty = errors.New("the directory is not empty and holds no forkline dataset")
)

// Config says which dataset to open and how.
type Config struct {
	// Dir is the dataset's directory.
	Dir string
	// Resume adds to the dataset in Dir; Replace removes the dataset in
	// Dir first (shard.RemoveDataset: only what forkline wrote). Neither:
	// Dir must hold no dataset. Both: resume when Dir holds one.
	Resume, Replace bool
	// Manifest is a new dataset's manifest. On resume, Fill is called with
	// the stored one instead (to update what the run may change: its plan,
	// an entry an old writer did not record).
	Manifest shard.Manifest
	Fill     func(*shard.Manifest)
	// Shards is the writer's configuration.
	Shards shard.Config
}

// Recorder writes a run's episodes into its dataset.
type Recorder struct {
	w       *shard.Writer
	blobs   *capture.BlobRecorder
	resumed bool

	mu  sync.Mutex
	err error // the first commit that failed
}

// Open creates, resumes or replaces the dataset in cfg.Dir. A refusal
// changes nothing in the directory.
func Open(cfg Config) (*Recorder, error) {
	// Another command writing the directory is said so, whatever it has
	// written yet, and asked again before each refusal below (the other
	// may have taken the directory meanwhile).
	busy := func() error {
		return shard.CheckFree(cfg.Dir)
	}
	if err := busy(); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(filepath.Join(cfg.Dir, shard.ManifestFile))
	exists := statErr == nil
	var (
		w   *shard.Writer
		err error
	)
	switch {
	case exists && cfg.Resume:
		if w, err = shard.Resume(cfg.Dir, cfg.Shards); err != nil {
			return nil, err
		}
		if cfg.Fill != nil {
			if err := w.Update(cfg.Fill); err != nil {
				w.Close(shard.StatusPartial)
				return nil, err
			}
		}
		r := &Recorder{w: w, blobs: capture.NewBlobRecorder(), resumed: true}
		if err := r.loadBlobs(cfg.Dir); err != nil {
			w.Close(shard.StatusPartial)
			return nil, err
		}
		return r, nil
	case exists && cfg.Replace:
		if err := shard.RemoveDataset(cfg.Dir); err != nil {
			return nil, fmt.Errorf("refusing to clear %s: %w", cfg.Dir, err)
		}
	case exists:
		if err := busy(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s", ErrExists, cfg.Dir)
	case cfg.Resume:
		return nil, fmt.Errorf("%w: %s (no %s)", ErrNothingToResume, cfg.Dir, shard.ManifestFile)
	}
	if entries, err := os.ReadDir(cfg.Dir); err == nil && len(entries) > 0 {
		if err := busy(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s", ErrNotEmpty, cfg.Dir)
	}
	if w, err = shard.Create(cfg.Dir, cfg.Manifest, cfg.Shards); err != nil {
		return nil, err
	}
	return &Recorder{w: w, blobs: capture.NewBlobRecorder()}, nil
}

// loadBlobs notes the blobs a resumed dataset already holds, so that none
// is stored twice.
func (r *Recorder) loadBlobs(dir string) error {
	if len(r.w.Manifest().Shards) == 0 {
		return nil
	}
	ds, err := shard.Open(dir)
	if err != nil {
		return err
	}
	for b, err := range ds.Blobs() {
		if err != nil {
			return err
		}
		r.blobs.Stored(b.SHA256)
	}
	return nil
}

// Writer is the dataset's writer (its manifest, committed episodes,
// generation events, dropping what a resume runs again).
func (r *Recorder) Writer() *shard.Writer { return r.w }

// Resumed reports whether Open resumed a dataset.
func (r *Recorder) Resumed() bool { return r.resumed }

// Commit writes one ended episode, with each of its blobs the run has not
// stored yet (in the generation of the first episode that references it, or
// an earlier one). b.Blobs is left holding the blobs stored with it, which
// is what a summary counts.
func (r *Recorder) Commit(ctx context.Context, b *shard.EpisodeBatch) error {
	err := r.blobs.Commit(b.Blobs, func(fresh []schemas.BlobRow) error {
		b.Blobs = fresh
		return r.w.Commit(ctx, *b)
	})
	if err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
	}
	return err
}

// Failed is the first commit that failed, or nil.
func (r *Recorder) Failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close records the summary in the manifest (when it encodes) and closes
// the dataset with status.
func (r *Recorder) Close(status shard.Status, sum manifest.Summary) error {
	if data, err := sum.Encode(); err == nil {
		r.w.Update(func(m *shard.Manifest) { m.Summary = data })
	}
	return r.w.Close(status)
}
