package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"

	_ "github.com/forkline/forkline/providers/local" // the program chooses its backend
	"github.com/forkline/forkline/serve"
)

// Run serves tasks as OpenEnv environments until its context is cancelled:
// WebSocket sessions at /ws, and the one-shot HTTP forms of reset and step
// used here (each runs in a fork of its own). Addr 127.0.0.1:0 picks a free
// port, which Ready reports.
func ExampleRun() {
	dir, err := os.MkdirTemp("", "forkline-serve-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	type result struct {
		sum *serve.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := serve.Run(ctx, serve.Config{
			Tasks:    "../examples/tasks/fix-sum.yaml",
			Provider: "local",
			WorkDir:  dir,
			Addr:     "127.0.0.1:0",
			Ready:    func(a net.Addr) { ready <- "http://" + a.String() },
		})
		done <- result{sum, err}
	}()
	var base string
	select {
	case base = <-ready:
	case r := <-done:
		fmt.Fprintln(os.Stderr, "the server did not start:", r.err)
		stop()
		return
	}

	post := func(path string, body any) map[string]any {
		b, _ := json.Marshal(body)
		resp, err := http.Post(base+path, "application/json", bytes.NewReader(b))
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			panic(err)
		}
		return out
	}
	reset := post("/reset", map[string]any{"seed": 0})
	obs := reset["observation"].(map[string]any)
	fmt.Println("reset:", obs["task_id"], "done:", reset["done"])

	step := post("/step", map[string]any{"task_id": "fix-sum", "action": map[string]any{"kind": "exec", "cmd": "sh sum.sh 3"}})
	obs = step["observation"].(map[string]any)
	fmt.Printf("step: output %q exit_code %v done: %v\n", obs["output"], obs["exit_code"], step["done"])

	stop() // as a signal would: the server drains, then returns what it served
	r := <-done
	fmt.Println("served:", r.sum.Resets, "resets,", r.sum.Steps, "steps, error:", r.err)
	// Output:
	// reset: fix-sum done: false
	// step: output "3\n" exit_code 0 done: false
	// served: 2 resets, 1 steps, error: <nil>
}
