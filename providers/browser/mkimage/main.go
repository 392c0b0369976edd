// Command mkimage builds forkline/chromium, the opt-in Docker image in which
// browser tasks run on the docker provider (package dockerimage says how).
// It needs root, debootstrap and a reachable Debian mirror, and takes a few
// minutes. An image already present is kept unless -force.
//
//	go run ./providers/browser/mkimage            # or: make images-browser
//	go run ./providers/browser/mkimage -force
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/forkline/forkline/providers/browser/dockerimage"
)

func main() {
	force := flag.Bool("force", false, "rebuild the image when it is already present")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: mkimage [-force]\n\nBuilds %s (Debian bookworm minbase + %s) on the Docker engine.\n\n",
			dockerimage.Image, strings.Join(dockerimage.Packages, ", "))
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := dockerimage.Build(ctx, dockerimage.Options{Force: *force, Log: os.Stdout}); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}
