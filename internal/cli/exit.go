package cli

import "fmt"

// The exit codes. Every subcommand uses a subset of them with these
// meanings; its help lists which, and what each means for it.
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitFailed: it ran and failed, or found what it checks for (a
	// divergence, a damaged dataset, a partial run).
	ExitFailed = 1
	// ExitBadInput: flags, arguments or input files are wrong; nothing was
	// changed.
	ExitBadInput = 2
	// ExitLosses: every episode of a run is a scaffold loss, or -max-loss
	// stopped it (docs/FAILURES.md).
	ExitLosses = 3
	// ExitUnavailable: a service the command depends on (the Docker
	// engine, the model server) was unavailable; run it again once it is
	// back.
	ExitUnavailable = 4
	// ExitInterrupted: SIGINT or SIGTERM stopped the command (128 + 2, as
	// shells report a process killed by SIGINT).
	ExitInterrupted = 130
)

// codeNames are the short meanings `forkline help` prints.
var codeNames = map[int]string{
	ExitOK:          "ok",
	ExitFailed:      "failed",
	ExitBadInput:    "bad input",
	ExitLosses:      "scaffold losses",
	ExitUnavailable: "a service unavailable",
	ExitInterrupted: "interrupted",
}

// Codes lists the exit codes in ascending order.
func Codes() []int {
	return []int{ExitOK, ExitFailed, ExitBadInput, ExitLosses, ExitUnavailable, ExitInterrupted}
}

// CodeName is the short meaning of code ("bad input"), "" for a code that
// is not one of the documented ones.
func CodeName(code int) string { return codeNames[code] }

// Exit is what one exit code means for one subcommand.
type Exit struct {
	Code    int    `json:"code"`
	Meaning string `json:"meaning"`
}

// checkExits refuses a subcommand that documents a code outside Codes (a
// programming error, caught by the tests of every command).
func checkExits(cmd string, exits []Exit) error {
	for _, e := range exits {
		if _, ok := codeNames[e.Code]; !ok {
			return fmt.Errorf("cli: %s documents exit code %d, which is not one of forkline's", cmd, e.Code)
		}
	}
	return nil
}
