package main

import (
	"io"
	"os"

	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/progress"
)

// isTerminal reports whether w is a terminal (progress then redraws one
// line instead of printing a line every few seconds).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressStream is where a command's progress goes and whether it is a
// terminal. On a terminal, stderr becomes a progress.Console from now on,
// so that log records, notes and errors are written above the progress
// line rather than onto it.
func progressStream(inv *cli.Invocation) (io.Writer, bool) {
	if !isTerminal(inv.Stderr) {
		return inv.Stderr, false
	}
	con := progress.NewConsole(inv.Stderr)
	inv.SetStderr(con)
	return con, true
}
