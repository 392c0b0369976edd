package collect

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/progress"
)

// setLogger makes the run's logger from Config.Logger: every record carries the run id, read when the record is made, so
// that a resume's records carry the id of the run it resumes. logf is the
// printf form of a warning, for the pieces (pool, policy) that log so.
func (inv *invocation) setLogger() {
	base := inv.cfg.Logger
	if base == nil {
		base = slog.New(slog.DiscardHandler)
	}
	inv.log = slog.New(runIDHandler{Handler: base.Handler(), runID: &inv.runID})
	inv.logf = func(format string, args ...any) { inv.log.Warn(fmt.Sprintf(format, args...)) }
}

// runIDHandler adds run_id, as it is when the record is made, to every
// record. The run id is set before any episode starts and never changes
// after, so reading it unguarded is safe.
type runIDHandler struct {
	slog.Handler
	runID *string
}

func (h runIDHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(slog.String("run_id", *h.runID))
	return h.Handler.Handle(ctx, r)
}

func (h runIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return runIDHandler{Handler: h.Handler.WithAttrs(as), runID: h.runID}
}

func (h runIDHandler) WithGroup(name string) slog.Handler {
	return runIDHandler{Handler: h.Handler.WithGroup(name), runID: h.runID}
}

// observers are what is told of the run: Config.Observer, and the progress
// meter when Config.Progress is set. The meter's Close prints its last
// line.
func (inv *invocation) observers() (observe.Observer, func()) {
	cfg := inv.cfg
	if cfg.Progress == nil {
		return inv.obs, func() {}
	}
	// The run's start, golden builds and end are log records: off a
	// terminal the meter leaves the end to them.
	m := progress.New(cfg.Progress, progress.Options{Command: "collect", TTY: cfg.ProgressTTY, EndLogged: true})
	return observe.Multi{inv.obs, m}, m.Close
}

// taskOfTemplate is the task id a pool template key names ("id@hash").
func taskOfTemplate(key string) string {
	id, _, _ := strings.Cut(key, "@")
	return id
}

// onGolden reports a golden build's progress to the observers, and logs
// its end.
func onGolden(obs observe.Observer, log *slog.Logger) func(pool.GoldenProgress) {
	return func(g pool.GoldenProgress) {
		task := taskOfTemplate(g.Template)
		obs.Observe(observe.Golden{Task: task, Phase: observe.GoldenPhase(g.Phase), Command: g.Command, Index: g.Index,
			Commands: g.Commands, Began: g.Began, Took: g.Took, Err: g.Err})
		switch g.Phase {
		case pool.GoldenBuilt:
			log.Info("golden checkpoint built", "task", task, "setup_commands", g.Commands, "took", g.Took.Round(1e6).String())
		case pool.GoldenFailed:
			log.Warn("golden checkpoint failed", "task", task, "took", g.Took.Round(1e6).String(), "err", g.Err)
		}
	}
}

// liveCounter knows how many episodes of this invocation ended, for the
// queue depth (episodes not yet begun).
type liveCounter struct {
	todo  int
	more  atomic.Int64 // planned since the run started (branches)
	ended atomic.Int64
}

func (l *liveCounter) live(pl *pool.Pool) func() observe.Live {
	return func() observe.Live {
		o := pl.Occupancy()
		queued := l.todo + int(l.more.Load()) - int(l.ended.Load()) - o.Busy
		return observe.Live{Replicas: o.Replicas, Busy: o.Busy, Standby: o.Standby, Queued: max(queued, 0)}
	}
}

// lineLog is an io.Writer whose every line is a log record at info: how a
// provider's progress lines (written for a terminal) join the run's log.
// A provider writes from the goroutines that get its images ready in
// parallel, so writes are serialized.
type lineLog struct {
	log     *slog.Logger
	mu      sync.Mutex
	partial []byte
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		if line := strings.TrimSpace(string(l.partial[:i])); line != "" {
			l.log.Info(line)
		}
		l.partial = l.partial[i+1:]
	}
}

// flush logs a last line that had no newline.
func (l *lineLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if line := strings.TrimSpace(string(l.partial)); line != "" {
		l.log.Info(line)
	}
	l.partial = nil
}
