package pool_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	_ "github.com/forkline/forkline/providers/local" // the program chooses its backend
	"github.com/forkline/forkline/runtime"
)

// A pool builds one golden checkpoint per template (files, then setup,
// once) and forks every episode's replica from it: each episode starts
// from the golden's state, and what one episode writes no other sees.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "forkline-pool-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	prov, err := providers.Open(ctx, "local", providers.Options{RunID: "pool-example", Dir: dir})
	if err != nil {
		panic(err)
	}
	defer prov.Close(ctx)

	p, err := pool.New(pool.Config{Provider: prov, Replicas: 2})
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)
	tmpl := &pool.Template{
		Key:   "notes",
		Spec:  providers.Spec{Files: map[string][]byte{"notes.txt": []byte("from the files\n")}},
		Setup: []string{"echo from the setup >> notes.txt"},
	}

	jobs := make(chan pool.Job, 3)
	for i := range 3 {
		jobs <- pool.Job{Template: tmpl, Payload: i}
	}
	close(jobs)
	seen := make([]string, 3) // by episode: each episode writes its own slot
	p.Run(ctx, jobs, func(ctx context.Context, job pool.Job, r pool.Replica, err error) pool.Outcome {
		if err != nil { // no replica could be had: the caller records why
			seen[job.Payload.(int)] = "no replica: " + err.Error()
			return pool.Done
		}
		i := job.Payload.(int)
		obs, err := r.Sandbox.Act(ctx, runtime.Action{Kind: runtime.ActExec,
			Cmd: fmt.Sprintf("echo episode %d >> notes.txt && cat notes.txt", i)})
		if err != nil {
			return pool.Broken // the sandbox broke: the pool replaces it
		}
		seen[i] = strings.ReplaceAll(strings.TrimSpace(string(obs.Output)), "\n", " | ")
		return pool.Done
	})
	for i, s := range seen {
		fmt.Printf("episode %d saw: %s\n", i, s)
	}
	fmt.Println("golden builds:", p.Stats().GoldenBuilds, "resets:", p.Stats().Resets, "strategy:", p.Strategy())
	// Output:
	// episode 0 saw: from the files | from the setup | episode 0
	// episode 1 saw: from the files | from the setup | episode 1
	// episode 2 saw: from the files | from the setup | episode 2
	// golden builds: 1 resets: 3 strategy: fork
}
