package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/record"
	"github.com/forkline/forkline/task"
)

// PolicyName is the policy entry of a served dataset's manifest: the
// actions came from a client outside forkline (a trainer), not from one of
// its policies. The entry's options name the protocol.
const PolicyName = "external"

// recorder commits served episodes to the dataset (record.Recorder: each
// distinct blob once), under the dataset's run id.
type recorder struct {
	*record.Recorder
	w     *shard.Writer
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
	pol := manifest.Policy{Name: PolicyName, ScriptSHA256: &noScript, Options: map[string]string{"protocol": "openenv", "server": "forkline serve"}}
	polRec := pol.Encode()
	if _, statErr := os.Stat(filepath.Join(cfg.Out, shard.ManifestFile)); statErr == nil && cfg.Resume {
		if err := checkResume(cfg, specs, prov, pol); err != nil {
			return nil, err
		}
	}
	rec, err := record.Open(record.Config{Dir: cfg.Out, Resume: cfg.Resume, Replace: cfg.Force, Shards: cfg.Shards,
		Manifest: shard.Manifest{Tool: shard.ToolName, ToolVersion: cfg.ToolVersion, RunID: runID, Tasks: tasksRec,
			Capture: cfg.Capture.MarshalManifest(), Provider: prov.Encode(), Policy: polRec}})
	switch {
	case err == nil:
	case errors.Is(err, record.ErrExists):
		return nil, badInput(fielderr.Sentence("serve", "Out", cfg.Out, "holds a dataset: Resume adds to it, Force replaces it").Mentions("Resume", "Force"))
	case errors.Is(err, record.ErrNothingToResume):
		return nil, badInput(fielderr.Errorf("serve", "Resume", "", "%s holds no dataset (no %s)", cfg.Out, shard.ManifestFile))
	case errors.Is(err, record.ErrNotEmpty):
		return nil, badInput(fielderr.Sentence("serve", "Out", cfg.Out, "is not empty and holds no forkline dataset; choose an empty or new directory"))
	case cfg.Force && !cfg.Resume:
		return nil, badInput(fielderr.New("serve", "Force", "", err))
	default:
		return nil, badInput(fielderr.New("serve", "Out", "", err))
	}
	w := rec.Writer()
	return &recorder{Recorder: rec, w: w, runID: w.Manifest().RunID}, nil
}

// checkResume says, reading it only, whether a served dataset may be
// resumed (record.Open then reopens it: its closed shards are checked, what
// a crash left half-written is removed, and recording goes on under its run
// id). One recorded by another command is refused, and so is one served
// with other tasks, another capture policy, another provider or a setting
// of it that shapes a sandbox (collect's rule, manifest.ResumeMismatches),
// changing nothing.
func checkResume(cfg Config, specs []task.Spec, prov manifest.Provider, pol manifest.Policy) error {
	ds, err := shard.Open(cfg.Out)
	if err != nil {
		return badInput(fielderr.New("serve", "Resume", "", err))
	}
	m := ds.Manifest()
	if len(m.Policy) > 0 {
		rec, err := manifest.DecodePolicy(m.Policy)
		if err != nil || rec.Name != PolicyName {
			return badInput(fielderr.Errorf("serve", "Resume", "", "%s was not recorded by forkline serve (its policy is %q)", cfg.Out, rec.Name))
		}
	}
	// collect's rule (manifest.ResumeMismatches): the same tasks, capture
	// policy, provider and every setting of it that changes what a
	// sandbox is; a setting that changes only how sandboxes are had does
	// not refuse the resume.
	diffs, err := manifest.ResumeMismatches(m, manifest.Resuming{Tasks: specs, Capture: cfg.Capture, Provider: prov, Policy: pol})
	if err != nil {
		return badInput(fielderr.Errorf("serve", "Resume", "", "%s: %w", cfg.Out, err))
	}
	if len(diffs) > 0 {
		return badInput(fmt.Errorf("serve: cannot resume %w", &manifest.ErrResumeMismatch{Dir: cfg.Out, Mismatches: diffs}))
	}
	return nil
}

// commit writes one ended episode.
func (r *recorder) commit(b shard.EpisodeBatch) error {
	return r.Commit(context.Background(), &b)
}

// close records the summary and closes the dataset: complete, since every
// episode the server ran ended and is in it; partial when the writer
// broke.
func (r *recorder) close(sum *Summary) error {
	status := shard.StatusComplete
	if sum.RecordErrors > 0 {
		status = shard.StatusPartial
	}
	if err := r.Close(status, manifest.Summary{Serve: sum}); err != nil {
		return fmt.Errorf("serve: closing the dataset: %w", err)
	}
	if sum.RecordErrors > 0 {
		return errors.New("serve: some episodes could not be recorded; the dataset is partial")
	}
	return nil
}
