package replay_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/forkline/forkline/collect"
	_ "github.com/forkline/forkline/policy/script"   // the program chooses its policies
	_ "github.com/forkline/forkline/providers/local" // and its backends
	"github.com/forkline/forkline/replay"
)

// Run re-executes stored episodes, action by action, in fresh forks of
// the same environments, and compares what each step shows now with what
// was recorded: a dataset whose episodes replay identical is one a
// trainer can trust to be reproducible.
func ExampleRun() {
	dir, err := os.MkdirTemp("", "forkline-replay-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	dataset := filepath.Join(dir, "run")
	if _, err := collect.Run(ctx, collect.Config{Tasks: "../examples/tasks/fix-sum.yaml", Provider: "local", Policy: "script",
		Replicas: 2, Repeats: 2, Out: dataset, WorkDir: dir}); err != nil {
		panic(err)
	}

	rep, err := replay.Run(ctx, replay.Config{
		In:       dataset, // the provider is the one the dataset was collected with
		Mode:     replay.Normalized,
		Replicas: 2,
		WorkDir:  dir,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println("identical:", rep.Identical, "diverged:", rep.Diverged, "errored:", rep.Errored)
	for _, ep := range rep.Episodes {
		fmt.Println(ep.TaskID, ep.Status, ep.Matched, "of", ep.Steps, "steps, reward", *ep.RewardRecorded, "->", *ep.RewardReplayed)
	}
	// Output:
	// identical: 2 diverged: 0 errored: 0
	// fix-sum identical 5 of 5 steps, reward 1 -> 1
	// fix-sum identical 5 of 5 steps, reward 1 -> 1
}
