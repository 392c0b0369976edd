// Command mkimages builds the images forkline's docker provider runs
// sandboxes in, without a registry: forkline/busybox always (Debian's static
// busybox, seconds), forkline/debian with -debian (debootstrap minbase
// bookworm, minutes, needs root). Images already on the engine are kept
// unless -force is given. It talks to the engine named by DOCKER_HOST (the
// default socket when unset).
//
//	go run ./providers/docker/mkimages            # make images
//	go run ./providers/docker/mkimages -debian    # also forkline/debian
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/forkline/forkline/providers/docker"
)

func main() {
	debian := flag.Bool("debian", false, "also build "+docker.ImageDebian+" (debootstrap; slow, needs root)")
	force := flag.Bool("force", false, "rebuild images that are already present")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: mkimages [-debian] [-force]\n\nBuilds %s (and %s with -debian) on the Docker engine.\n\n", docker.ImageBusybox, docker.ImageDebian)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	names := []string{docker.ImageBusybox}
	if *debian {
		names = append(names, docker.ImageDebian)
	}
	if err := run(ctx, names, *force); err != nil {
		fmt.Fprintln(os.Stderr, "mkimages:", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, names []string, force bool) error {
	cli, err := docker.Connect(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	build := docker.EnsureImages
	if force {
		build = docker.RebuildImages
	}
	sts, err := build(ctx, cli, names...)
	for _, st := range sts {
		if st.Built {
			fmt.Printf("%s: built %s in %s\n", st.Name, st.ID, st.Took.Round(1e6))
		} else {
			fmt.Printf("%s: present (%s)\n", st.Name, st.ID)
		}
	}
	return err
}
