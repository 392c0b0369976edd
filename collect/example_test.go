package collect_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/forkline/forkline/collect"
	_ "github.com/forkline/forkline/policy/script"   // the program chooses its policies
	_ "github.com/forkline/forkline/providers/local" // and its backends
)

// Run collects a dataset: every task of Tasks, Repeats times, Replicas
// episodes at once, each forked from the task's golden checkpoint, into
// crash-safe shards in Out. Here the script policy plays each task's own
// solution on the local provider.
func ExampleRun() {
	dir, err := os.MkdirTemp("", "forkline-collect-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cfg := collect.Config{
		Tasks:    "../examples/tasks/fix-sum.yaml",
		Provider: "local",
		Policy:   "script",
		Replicas: 2,
		Repeats:  3,
		Out:      filepath.Join(dir, "run"),
		WorkDir:  dir,
	}
	sum, err := collect.Run(context.Background(), cfg)
	switch {
	case errors.Is(err, collect.ErrConfig):
		fmt.Fprintln(os.Stderr, "fix the config or the tasks:", err)
		return
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return
	}
	r := sum.Report()
	fmt.Println(r.Status, r.Episodes, "episodes, by exit:", r.ByExit, "reward mean:", *r.RewardMean)

	// A resume of a complete run has nothing to do.
	cfg.Resume = true
	sum, err = collect.Run(context.Background(), cfg)
	fmt.Println(sum.Report().NothingToDo, err)
	// Output:
	// complete 3 episodes, by exit: map[done:3] reward mean: 1
	// true <nil>
}
