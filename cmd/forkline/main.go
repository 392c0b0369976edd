// Command forkline generates agent-trajectory datasets: it collects
// episodes from forked sandboxes into crash-safe Parquet datasets, merges
// the parts of a distributed run, inspects and verifies datasets, exports
// them to trainer formats, replays them, and builds its Docker images.
//
//	forkline collect -tasks examples/tasks -replicas 4 -repeats 8 -out runs/demo
//	forkline inspect runs/demo
//	forkline export -in runs/demo -to chat-jsonl -out out/chat
//	forkline replay -in runs/demo
//
// Each subcommand parses its flags into an options struct, calls one
// library function and maps its error to an exit code; the shared parts
// (flags, help, signals, exit codes) are internal/cli. `forkline help`
// lists the subcommands, `forkline help SUBCOMMAND` shows one's flags, and
// docs/cli.md holds every subcommand's help (a test keeps it in step).
package main

import (
	"os"

	"github.com/forkline/forkline/internal/cli"

	_ "github.com/forkline/forkline/policy/all"
	_ "github.com/forkline/forkline/providers/all"
)

func main() { os.Exit(run(os.Args[1:])) }

// run runs a command line with the signal handling of every subcommand,
// writing to the process's stdout and stderr as they are when it is called.
func run(args []string) int { return app().Main(args, os.Stdout, os.Stderr) }

// app is forkline with its subcommands, in the order help lists them.
func app() *cli.App {
	return &cli.App{
		Name:    "forkline",
		Summary: "agent-trajectory datasets for RL and SFT, collected from forked sandboxes",
		Commands: []*cli.Command{
			collectCommand(),
			mergeCommand(),
			inspectCommand(),
			viewCommand(),
			verifyCommand(),
			exportCommand(),
			replayCommand(),
			serveCommand(),
			imagesCommand(),
			relayCommand(),
			versionCommand(),
		},
		VersionCommand: "version",
	}
}
