package shard_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

func Example() {
	tmp, err := os.MkdirTemp("", "forkline-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "run")

	// Write: one Commit per finished episode, Close at the end.
	w, err := shard.Create(dir, shard.Manifest{RunID: "run-1", ToolVersion: "dev"}, shard.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	for i := range 3 {
		id := fmt.Sprintf("ep-%d", i)
		b := shard.EpisodeBatch{
			Episode: schemas.EpisodeRow{EpisodeID: id, RunID: "run-1", TaskID: "hello", ExitReason: "done", Steps: 1},
			Steps: []schemas.StepRow{{EpisodeID: id, StepIndex: 0, ActionKind: "exec",
				ActionJSON: `{"kind":"exec","cmd":"echo hi"}`, Output: "hi\n"}},
			Rewards: []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: new(1.0)}},
		}
		if err := w.Commit(context.Background(), b); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Close(shard.StatusComplete); err != nil {
		log.Fatal(err)
	}

	// Read: whole episodes, one at a time.
	ds, err := shard.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	err = ds.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
		fmt.Printf("%s: %d step(s), %s %q, reward %.0f\n", ep.EpisodeID, len(steps), steps[0].ActionKind, steps[0].Output, *rewards[0].Value)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	rep, err := shard.Verify(dir)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", ds.Manifest().Status, "shards:", rep.Shards, "ok:", rep.OK())
	// Output:
	// ep-0: 1 step(s), exec "hi\n", reward 1
	// ep-1: 1 step(s), exec "hi\n", reward 1
	// ep-2: 1 step(s), exec "hi\n", reward 1
	// status: complete shards: 3 ok: true
}
