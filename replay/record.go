package replay

import (
	"context"
	"time"

	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/record"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// recording writes replayed episodes as a new dataset (Config.Record): the
// same episode ids and tasks, the steps as they happened in the replay,
// captured under the recording's capture policy, and the replayed rewards.
// It is written through the recorder every command writes datasets with
// (record.Recorder: a new directory only, each distinct blob once).
type recording struct {
	rec   *record.Recorder
	runID string
}

func newRecording(cfg Config, src shard.Manifest, specs []task.Spec, prov manifest.Provider) (*recording, error) {
	tasks, err := task.EncodeRecords(specs)
	if err != nil {
		return nil, err
	}
	runID := "replay-" + time.Now().UTC().Format("20060102T150405Z")
	// The provider entry is the one every command writes (episode.Env's
	// record), with the image the replay ran in place of the tasks' own.
	prov.Image = cfg.Image
	polRec := manifest.Policy{Name: "replay", Source: cfg.In, SourceRunID: src.RunID}.Encode()
	rec, err := record.Open(record.Config{Dir: cfg.Record, Shards: shard.DefaultConfig(), Manifest: shard.Manifest{
		SchemaVersion: schemas.Version, Tool: shard.ToolName, ToolVersion: src.ToolVersion, RunID: runID,
		Provider: prov.Encode(), Policy: polRec, Capture: src.Capture, Tasks: tasks, Plan: src.Plan,
	}})
	if err != nil {
		return nil, fielderr.New("replay", "Record", "", err)
	}
	return &recording{rec: rec, runID: runID}, nil
}

// commit writes one replayed episode's rows (episode.Episode.Rows).
func (r *recording) commit(ctx context.Context, b shard.EpisodeBatch) error {
	return r.rec.Commit(context.WithoutCancel(ctx), &b)
}

// close records the replay's counts in the manifest and closes the
// recording: complete when every selected episode was replayed without an
// error, partial otherwise.
func (r *recording) close(rep *Report, finished bool) error {
	status := shard.StatusComplete
	if !finished || rep.Errored > 0 {
		status = shard.StatusPartial
	}
	return r.rec.Close(status, manifest.Summary{Replay: &manifest.Replay{ReplayOf: rep.Dataset, Identical: rep.Identical, Diverged: rep.Diverged, Errored: rep.Errored}})
}
