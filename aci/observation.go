package aci

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/forkline/forkline/runtime"
)

// ObservationText is what a model is shown of one step's result, as text:
//
//	exit code: N                 exec actions, always
//	[forkline: the action timed out and was killed]
//	error: KIND                  a failure other than a non-zero exit
//	[forkline: a WxH screenshot was taken; this policy sends text only]
//	the output's text            "(no output)" for an exec without any;
//	                             when limit > 0 and the text is longer, its
//	                             head and tail around an elision marker
//
// It is the one rendering shared by policies that show observations as text
// and by exporters that write conversations, so training data matches what
// the policy shows the trained model.
func ObservationText(s runtime.Step, limit int) string {
	o := s.Observation
	var b strings.Builder
	b.Grow(len(o.Output) + 64)
	exec := s.Action.Kind == runtime.ActExec
	if exec {
		b.WriteString("exit code: ")
		b.WriteString(strconv.Itoa(o.ExitCode))
		b.WriteByte('\n')
	}
	switch {
	case o.TimedOut:
		b.WriteString("[forkline: the action timed out and was killed]\n")
	case o.Error && o.ErrorKind != runtime.ErrNone && o.ErrorKind != runtime.ErrExitStatus:
		fmt.Fprintf(&b, "error: %s\n", o.ErrorKind)
	}
	if o.Screenshot != nil {
		fmt.Fprintf(&b, "[forkline: a %dx%d screenshot was taken; this policy sends text only]\n", o.Screenshot.Width, o.Screenshot.Height)
	}
	if len(o.Output) > 0 && (limit <= 0 || len(o.Output) <= limit) && utf8.Valid(o.Output) {
		// Valid text that needs no elision is written as it is, without
		// the string Text makes of it first.
		b.Write(o.Output)
		return b.String()
	}
	text := o.Text()
	switch {
	case text == "" && exec:
		b.WriteString("(no output)")
	case limit > 0 && len(text) > limit:
		b.WriteString(Elide(text, limit))
	default:
		b.WriteString(text)
	}
	return b.String()
}

// Elide keeps about limit bytes of s — its first half and its last half,
// never cutting a UTF-8 sequence — around a marker that says how many bytes
// were left out. s no longer than limit is returned as is.
func Elide(s string, limit int) string {
	if limit <= 0 || len(s) <= limit {
		return s
	}
	head := limit - limit/2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	tail := len(s) - limit/2
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + fmt.Sprintf("\n[... forkline: %d bytes elided from the middle of this output ...]\n", tail-head) + s[tail:]
}
