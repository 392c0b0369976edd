package docker_test

import (
	"context"
	"fmt"
	"log"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/docker"
	"github.com/forkline/forkline/runtime"
)

// A golden checkpoint made once, a replica forked from it. Ready replicas
// kept ahead of time are the pool's (pool.Config.Standby).
func Example() {
	ctx := context.Background()
	p, err := providers.Open(ctx, docker.Name, providers.Options{
		RunID:  "example",
		Params: map[string]string{docker.ParamNetwork: "none"},
	})
	if err != nil {
		log.Fatal(err) // docker.ErrNoEngine says how to start an engine
	}
	defer p.Close(ctx)
	// Remove what crashed runs of this host left; opening removed nothing.
	if sw, ok := providers.As[providers.Sweeper](p); ok {
		if err := sw.Sweep(ctx); err != nil {
			log.Fatal(err)
		}
	}

	golden, err := p.Create(ctx, providers.Spec{
		Files:     map[string][]byte{"task.txt": []byte("count the lines\n")},
		Resources: providers.Resources{CPUs: 1, MemoryMB: 512, Pids: 256},
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := golden.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "seq 100 > data.txt"}); err != nil {
		log.Fatal(err)
	}
	cp, err := p.Checkpoint(ctx, golden, "golden")
	if err != nil {
		log.Fatal(err)
	}
	_ = golden.Close(ctx)

	replica, err := p.Fork(ctx, cp)
	if err != nil {
		log.Fatal(err)
	}
	defer replica.Close(ctx)
	obs, err := replica.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "wc -l < data.txt", TimeoutMS: 5000})
	if err != nil {
		log.Fatal(err) // the sandbox broke: the episode is env_error
	}
	fmt.Print(obs.Text())
}

// Building the images once per machine, as `forkline images` does.
func ExampleEnsureImages() {
	ctx := context.Background()
	cli, err := docker.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	st, err := docker.EnsureImages(ctx, cli, docker.ImageBusybox)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st[0].Name, st[0].Built)
}

// Cleaning up after a crashed run.
func ExampleSweep() {
	ctx := context.Background()
	cli, err := docker.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	res, err := docker.Sweep(ctx, cli, docker.SweepOptions{DeadOwners: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("removed %d containers and %d images\n", len(res.Containers), len(res.Images))
}
