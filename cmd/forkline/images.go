package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/providers/docker"
)

type imagesOptions struct {
	names []string
	force bool
}

func imagesCommand() *cli.Command {
	return &cli.Command{
		Name:    "images",
		Summary: "build forkline's Docker images: " + strings.Join(docker.KnownImages(), ", "),
		About: `Builds the images the docker provider runs sandboxes in, on the engine DOCKER_HOST names (the
default socket when unset), without a registry or a Dockerfile: each is imported from a root
filesystem made on the host. forkline/busybox is Debian's static busybox (seconds; needs
busybox-static). forkline/debian is debootstrap --variant=minbase bookworm and forkline/chromium
that plus Debian's chromium, for browser tasks (minutes; root, debootstrap and a reachable Debian
mirror, FORKLINE_DEBIAN_MIRROR to choose one). forkline/chromium starts from forkline/debian's files
when that image is on the engine (name it first: -image forkline/debian,forkline/chromium), and
debootstraps only when it is not. An image already on the engine is kept unless -force.`,
		Examples: []string{
			"forkline images",
			"forkline images -image forkline/debian,forkline/chromium",
			"forkline images -image forkline/busybox,forkline/debian -force",
		},
		Exits: []cli.Exit{
			{Code: cli.ExitOK, Meaning: "every image asked for is on the engine"},
			{Code: cli.ExitFailed, Meaning: "a build failed (what it needs is named)"},
			{Code: cli.ExitBadInput, Meaning: "an unknown image name (the known ones are listed)"},
			{Code: cli.ExitUnavailable, Meaning: "no Docker engine answers"},
			{Code: cli.ExitInterrupted, Meaning: "interrupted by SIGINT/SIGTERM"},
		},
		Setup: func(f *cli.FlagSet) cli.Runner {
			o := &imagesOptions{}
			f.Group("images", "-image forkline/busybox,forkline/chromium -force")
			f.List(&o.names, "image", "NAME,...", "the images to build: "+strings.Join(docker.KnownImages(), ", ")).ShowDefault(docker.ImageBusybox)
			f.Bool(&o.force, "force", "rebuild images that are already on the engine (replacing the tag)")
			f.Logging()
			return func(ctx context.Context, inv *cli.Invocation) int { return runImages(ctx, inv, o) }
		},
	}
}

// imageResult is one image as -json prints it.
type imageResult struct {
	Name    string  `json:"name"`
	ID      string  `json:"id"`
	Built   bool    `json:"built"`
	Seconds float64 `json:"seconds,omitempty"`
}

func runImages(ctx context.Context, inv *cli.Invocation, o *imagesOptions) int {
	names := o.names
	if len(names) == 0 {
		names = []string{docker.ImageBusybox}
	}
	known := docker.KnownImages()
	for _, n := range names {
		if !slices.Contains(known, n) {
			inv.Errorf("-image %s: unknown image (known: %s)", n, strings.Join(known, ", "))
			return cli.ExitBadInput
		}
	}
	engine, err := docker.Connect(ctx)
	switch {
	case errors.Is(err, context.Canceled):
		return inv.Fail(cli.ExitInterrupted, err)
	case errors.Is(err, docker.ErrNoEngine):
		return inv.Fail(cli.ExitUnavailable, err)
	case err != nil:
		return inv.Fail(cli.ExitFailed, err)
	}
	defer engine.Close()
	sts, err := docker.BuildImages(ctx, engine, docker.BuildOptions{Names: names, Force: o.force, Log: inv.Notes()})
	out := []imageResult{}
	for _, st := range sts {
		out = append(out, imageResult{Name: st.Name, ID: st.ID, Built: st.Built, Seconds: st.Took.Round(time.Millisecond).Seconds()})
		if inv.JSON {
			continue
		}
		if st.Built {
			fmt.Fprintf(inv.Stdout, "%s: built %s in %s\n", st.Name, st.ID, st.Took.Round(time.Millisecond))
		} else {
			fmt.Fprintf(inv.Stdout, "%s: present (%s); -force rebuilds it\n", st.Name, st.ID)
		}
	}
	if inv.JSON {
		inv.PrintJSON(out)
	}
	switch {
	case err == nil:
		return cli.ExitOK
	case errors.Is(err, context.Canceled):
		return inv.Fail(cli.ExitInterrupted, err)
	default:
		return inv.Fail(cli.ExitFailed, err)
	}
}
