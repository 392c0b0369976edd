package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// Log formats (-log-format).
const (
	LogText = "text" // slog's key=value lines
	LogJSON = "json" // one JSON object per line
)

// Logging gives the subcommand -log-format and -log-level (in the common
// group): a subcommand that logs calls it in its Setup and takes its
// logger from Invocation.Logger.
func (f *FlagSet) Logging() { f.logging = true }

func (f *FlagSet) addLogging() {
	f.logFormat, f.logLevel = LogText, "info"
	f.String(&f.logFormat, "log-format", "text|json", "log records on stderr as key=value text or as one JSON object per line (with json, everything on stderr is a record: notes, progress, errors)")
	f.String(&f.logLevel, "log-level", "debug|info|warn|error", "the least severe records logged; debug adds a record per episode (-quiet raises it to error)")
}

// setupLogging makes the invocation's logger from the flags; with JSON
// logs, Stderr becomes a writer that turns each line into a record, so
// that nothing on stderr breaks a log shipper's parse.
func (inv *Invocation) setupLogging(format, level string, quiet bool) error {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	case "warn", "warning":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return fmt.Errorf("%s: -log-level %q: want debug, info, warn or error", inv.Prefix(), level)
	}
	if quiet && lv < slog.LevelError {
		// -quiet: "errors are still printed", and nothing else.
		lv = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: lv}
	w := &lockedWriter{w: inv.Stderr}
	inv.logOut = w
	var h slog.Handler
	switch format {
	case LogText:
		h = slog.NewTextHandler(w, opts)
	case LogJSON:
		h = slog.NewJSONHandler(w, opts)
	default:
		return fmt.Errorf("%s: -log-format %q: want text or json", inv.Prefix(), format)
	}
	inv.logger = slog.New(h).With("command", inv.Command)
	if format == LogJSON {
		inv.logJSON = true
		inv.Stderr = &recordWriter{log: inv.logger}
	}
	return nil
}

// Logger is the subcommand's logger (-log-format, -log-level), writing to
// stderr; for a subcommand that did not call FlagSet.Logging, a text logger
// at info.
func (inv *Invocation) Logger() *slog.Logger {
	if inv.logger == nil {
		inv.logOut = &lockedWriter{w: inv.Stderr}
		inv.logger = slog.New(slog.NewTextHandler(inv.logOut, nil)).With("command", inv.Command)
	}
	return inv.logger
}

// SetStderr sends everything the subcommand writes to stderr — notes,
// errors and its text log records — to w from now on: a terminal's
// progress line (progress.Console) wraps stderr so that records are
// written above the line, never onto it. With JSON logs stderr is records
// already, and nothing changes.
func (inv *Invocation) SetStderr(w io.Writer) {
	if inv.logJSON {
		return
	}
	inv.Stderr = w
	if inv.logOut != nil {
		inv.logOut.mu.Lock()
		inv.logOut.w = w
		inv.logOut.mu.Unlock()
	}
}

// LogJSON reports whether the subcommand logs JSON (-log-format json):
// progress then goes as records rather than a bar or plain lines.
func (inv *Invocation) LogJSON() bool { return inv.logJSON }

// lockedWriter serializes the handler's writes with anything else a
// command writes to the same stream.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// serialized is w when it is a file (the kernel takes each write whole),
// and w behind a lock otherwise.
func serialized(w io.Writer) io.Writer {
	switch w.(type) {
	case *os.File, *lockedWriter:
		return w
	}
	return &lockedWriter{w: w}
}

// recordWriter turns every line written to it into an info record.
type recordWriter struct {
	mu   sync.Mutex
	log  *slog.Logger
	part []byte
}

func (r *recordWriter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.part = append(r.part, p...)
	for {
		i := bytes.IndexByte(r.part, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(r.part[:i]), "\r")
		r.part = r.part[i+1:]
		if strings.TrimSpace(line) != "" {
			r.log.Log(context.Background(), slog.LevelInfo, line)
		}
	}
	return len(p), nil
}
