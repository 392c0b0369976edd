package main

import (
	"io"
	"os"
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
