package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// PolicyName is the policy entry of a served dataset's manifest: the
// actions came from a client outside forkline (a trainer), not from one of
// its policies. The entry's options name the protocol.
const PolicyName = "external"

// recorder commits served episodes to the dataset, each distinct blob once.
type recorder struct {
	w     *shard.Writer
	blobs *capture.BlobRecorder
	runID string
}

// openRecorder creates the dataset in cfg.Out, replaces it (-force) or
// adds to it (-resume: the dataset must have been served with the same
// tasks and provider, so that every episode in it replays against the
// specs its manifest holds).
func openRecorder(cfg Config, runID string, specs []task.Spec, prov manifest.Provider) (*recorder, error) {
	tasksRec, err := task.EncodeRecords(specs)
	if err != nil {
		return nil, err
	}
	noScript := ""
	polRec := manifest.Policy{Name: PolicyName, ScriptSHA256: &noScript, Options: map[string]string{"protocol": "openenv", "server": "forkline serve"}}.Encode()
	_, statErr := os.Stat(filepath.Join(cfg.Out, shard.ManifestFile))
	exists := statErr == nil
	var w *shard.Writer
	switch {
	case exists && cfg.Resume:
		if w, err = resumeDataset(cfg, tasksRec, prov); err != nil {
			return nil, err
		}
	case exists && cfg.Force:
		if err := shard.RemoveDataset(cfg.Out); err != nil {
			return nil, badInput(fmt.Errorf("serve: -force refuses to clear %s: %w", cfg.Out, err))
		}
		fallthrough
	case !exists && !cfg.Resume:
		if entries, err := os.ReadDir(cfg.Out); err == nil && len(entries) > 0 {
			return nil, badInput(fmt.Errorf("serve: -out %s is not empty and holds no forkline dataset; choose an empty or new directory", cfg.Out))
		}
		m := shard.Manifest{Tool: shard.ToolName, ToolVersion: cfg.ToolVersion, RunID: runID, Tasks: tasksRec,
			Capture: cfg.Capture.MarshalManifest(), Provider: prov.Encode(), Policy: polRec}
		if w, err = shard.Create(cfg.Out, m, cfg.Shards); err != nil {
			return nil, badInput(err)
		}
	case exists:
		return nil, badInput(fmt.Errorf("serve: -out %s holds a dataset: -resume adds to it, -force replaces it", cfg.Out))
	default:
		return nil, badInput(fmt.Errorf("serve: -resume: %s holds no dataset (no %s)", cfg.Out, shard.ManifestFile))
	}
	r := &recorder{w: w, blobs: capture.NewBlobRecorder(), runID: w.Manifest().RunID}
	if len(w.Manifest().Shards) > 0 && cfg.Capture.Pixels == capture.PixelsHash {
		if err := r.loadBlobs(cfg.Out); err != nil {
			w.Close(shard.StatusPartial)
			return nil, err
		}
	}
	return r, nil
}

// resumeDataset reopens a served dataset after a stop or a crash: its
// closed shards are checked, what a crash left half-written is removed,
// and recording goes on under its run id. One served with other tasks,
// another provider or a setting of it that shapes a sandbox (collect's
// rule, manifest.Provider.SettingDiffs), another capture policy or by
// another policy is refused, changing nothing.
func resumeDataset(cfg Config, tasksRec json.RawMessage, prov manifest.Provider) (*shard.Writer, error) {
	ds, err := shard.Open(cfg.Out)
	if err != nil {
		return nil, badInput(fmt.Errorf("serve: -resume: %w", err))
	}
	m := ds.Manifest()
	if len(m.Policy) > 0 {
		rec, err := manifest.DecodePolicy(m.Policy)
		if err != nil || rec.Name != PolicyName {
			return nil, badInput(fmt.Errorf("serve: -resume: %s was not recorded by forkline serve (its policy is %q)", cfg.Out, rec.Name))
		}
	}
	if diff := differentTasks(m.Tasks, tasksRec); diff != "" {
		return nil, badInput(fmt.Errorf("serve: -resume: %s was served with other tasks: %s", cfg.Out, diff))
	}
	was, err := manifest.DecodeProvider(m.Provider)
	if err != nil {
		return nil, badInput(fmt.Errorf("serve: -resume: %s: %w", cfg.Out, err))
	}
	if was.Name != prov.Name {
		return nil, badInput(fmt.Errorf("serve: -resume: %s was served on provider %s, not %s", cfg.Out, was.Name, prov.Name))
	}
	// collect's rule: a setting that changes what a sandbox is refuses the
	// resume; one that changes only how sandboxes are had does not.
	if diffs := was.SettingDiffs(prov.Params); len(diffs) > 0 {
		return nil, badInput(fmt.Errorf("serve: -resume: %s was served otherwise: %s", cfg.Out, strings.Join(diffs, "; ")))
	}
	if !bytes.Equal(compactJSON(m.Capture), compactJSON(cfg.Capture.MarshalManifest())) {
		return nil, badInput(fmt.Errorf("serve: -resume: %s was recorded under capture policy %s, not %s", cfg.Out, m.Capture, cfg.Capture.MarshalManifest()))
	}
	w, err := shard.Resume(cfg.Out, cfg.Shards)
	if err != nil {
		return nil, badInput(fmt.Errorf("serve: -resume: %w", err))
	}
	return w, nil
}

func differentTasks(recorded, serving json.RawMessage) string {
	a, err := task.DecodeRecords(recorded)
	if err != nil {
		return err.Error()
	}
	b, _ := task.DecodeRecords(serving)
	var diffs []string
	for id, s := range a {
		if t, ok := b[id]; !ok {
			diffs = append(diffs, id+" is not served now")
		} else if s.Hash() != t.Hash() {
			diffs = append(diffs, id+" changed")
		}
	}
	for id := range b {
		if _, ok := a[id]; !ok {
			diffs = append(diffs, id+" is new")
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

func compactJSON(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

// loadBlobs notes the blobs the dataset already holds.
func (r *recorder) loadBlobs(dir string) error {
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

// commit writes one ended episode.
func (r *recorder) commit(b shard.EpisodeBatch) error {
	return r.blobs.Commit(b.Blobs, func(fresh []schemas.BlobRow) error {
		b.Blobs = fresh
		return r.w.Commit(context.Background(), b)
	})
}

// close records the summary and closes the dataset: complete, since every
// episode the server ran ended and is in it; partial when the writer
// broke.
func (r *recorder) close(sum *Summary) error {
	if data, err := (manifest.Summary{Serve: sum}).Encode(); err == nil {
		r.w.Update(func(m *shard.Manifest) { m.Summary = data })
	}
	status := shard.StatusComplete
	if sum.RecordErrors > 0 {
		status = shard.StatusPartial
	}
	err := r.w.Close(status)
	if err != nil {
		return fmt.Errorf("serve: closing the dataset: %w", err)
	}
	if sum.RecordErrors > 0 {
		return errors.New("serve: some episodes could not be recorded; the dataset is partial")
	}
	return nil
}
