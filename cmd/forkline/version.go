package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/schemas"
)

// buildInfo is what `forkline version` reports.
type buildInfo struct {
	// Version is the tool version every manifest records (tool_version).
	Version string `json:"version"`
	// SchemaVersion is the dataset schema this build writes and reads.
	SchemaVersion int `json:"schema_version"`
	// Commit and Modified come from the VCS stamp go build embeds; empty
	// when the binary was built without one (go run, go test, -buildvcs=false).
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func currentBuild() buildInfo {
	b := buildInfo{Version: collect.Version, SchemaVersion: schemas.Version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	return b
}

// String is the one line `forkline version` prints.
func (b buildInfo) String() string {
	s := fmt.Sprintf("forkline %s (dataset schema %d", b.Version, b.SchemaVersion)
	if b.Commit != "" {
		c := b.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += ", commit " + c
		if b.Modified {
			s += " with local changes"
		}
	}
	return s + ", " + b.Go + " " + b.Platform + ")"
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:    "version",
		Summary: "print forkline's version (also forkline -version)",
		About: `Prints the tool version that every manifest it writes records, the dataset schema version it
reads and writes, the commit it was built from (when the build recorded one), and the Go toolchain
and platform.`,
		Examples: []string{"forkline version", "forkline -version", "forkline version -json"},
		Exits:    []cli.Exit{{Code: cli.ExitOK, Meaning: "printed"}},
		Setup: func(f *cli.FlagSet) cli.Runner {
			return func(ctx context.Context, inv *cli.Invocation) int {
				b := currentBuild()
				if inv.JSON {
					inv.PrintJSON(b)
				} else {
					fmt.Fprintln(inv.Stdout, b)
				}
				return cli.ExitOK
			}
		},
	}
}
