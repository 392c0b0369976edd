// Package progress shows how a running command is doing, truthfully: on a
// terminal one line redrawn in place, elsewhere (a log file, a Slurm job's
// output, a pod's log) a plain line every few seconds — or a log record,
// when the command logs JSON. It shows what the run is waiting for while a
// golden checkpoint builds (which task, which setup command, for how long),
// counts steps as they happen rather than when episodes end, and gives an
// ETA from the episode rate once one has ended.
//
// A Meter is an observe.Observer fed by the collector and the replayer; a
// command without episodes (export) drives it with Begin and Advance. It
// must not know what produced the events.
package progress

import (
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/forkline/forkline/observe"
)

// Options configures a Meter.
type Options struct {
	// Command names the lines ("collect", "replay", "export").
	Command string
	// TTY redraws one line in place; otherwise a plain line is printed
	// every Every.
	TTY bool
	// Every is how often a line is drawn: default 200ms on a terminal, 10s
	// otherwise.
	Every time.Duration
	// Logger, when set, gets the plain lines as info records (message
	// "progress", the counts as attributes) instead of the writer: a
	// command that logs JSON keeps its stderr one record per line.
	Logger *slog.Logger
	// Unit is what the total counts: "episodes" by default.
	Unit string
	// EndLogged says the command records the run's end itself (collect's
	// and replay's "run ended" record, then their summary): off a
	// terminal the meter then draws no last line, so that the end is not
	// said twice.
	EndLogged bool
}

// Meter draws progress until Close.
type Meter struct {
	w    io.Writer
	opts Options
	now  func() time.Time

	mu      sync.Mutex
	started bool
	began   time.Time // the run (or Begin)
	first   time.Time // the first episode began (its reset), for the rate
	runID   string
	total   int64 // to do in this invocation
	before  int64 // kept before (a resumed run)
	done    int64
	steps   int64
	losses  int64
	live    func() observe.Live
	goldens map[string]*golden // builds in progress, by task
	width   int                // of the last TTY line, to blank it

	// wmu serializes writes to w: events arrive from every replica at
	// once, and w (a file, a buffer) need not be safe for concurrent use.
	wmu sync.Mutex

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// printf writes to w, one writer at a time.
func (m *Meter) printf(format string, args ...any) {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	fmt.Fprintf(m.w, format, args...)
}

type golden struct {
	phase        observe.GoldenPhase
	cmd          string
	index, count int
	began        time.Time
}

// New returns a Meter writing to w; it starts drawing at the first event
// (RunStarted or Begin).
func New(w io.Writer, o Options) *Meter {
	if o.Every <= 0 {
		o.Every = 10 * time.Second
		if o.TTY {
			o.Every = 200 * time.Millisecond
		}
	}
	if o.Unit == "" {
		o.Unit = "episodes"
	}
	if o.Logger != nil {
		o.TTY = false
	}
	return &Meter{w: w, opts: o, now: time.Now, goldens: map[string]*golden{}, stop: make(chan struct{})}
}

// Begin starts a count of total units (a command without episodes).
func (m *Meter) Begin(total int64) {
	m.mu.Lock()
	m.total = total
	m.mu.Unlock()
	m.start()
}

// Advance counts n more units done.
func (m *Meter) Advance(n int64) {
	m.mu.Lock()
	if m.first.IsZero() {
		m.first = m.began
	}
	m.done += n
	m.mu.Unlock()
}

// Observe takes a run's events.
func (m *Meter) Observe(e observe.Event) {
	switch e := e.(type) {
	case observe.RunStarted:
		m.mu.Lock()
		m.runID, m.total, m.before, m.live = e.RunID, int64(e.Todo), int64(e.KeptBefore), e.Live
		m.mu.Unlock()
		m.start()
	case observe.Golden:
		m.mu.Lock()
		switch e.Phase {
		case observe.GoldenBuilt, observe.GoldenFailed:
			delete(m.goldens, e.Task)
		default:
			m.goldens[e.Task] = &golden{phase: e.Phase, cmd: e.Command, index: e.Index, count: e.Commands, began: e.Began}
		}
		m.mu.Unlock()
		if !m.opts.TTY && e.Phase == observe.GoldenSetup {
			// A setup command can run for minutes: say at once which one.
			m.plain(fmt.Sprintf("golden %s: setup %d/%d: %s", e.Task, e.Index+1, e.Commands, oneLine(e.Command, 120)),
				"task", e.Task, "setup_command", e.Index+1, "of", e.Commands)
		}
	case observe.Planned:
		m.mu.Lock()
		m.total += int64(e.Added)
		m.mu.Unlock()
	case observe.Reset:
		m.mu.Lock()
		if m.first.IsZero() {
			m.first = m.now()
		}
		m.mu.Unlock()
	case observe.Step:
		m.mu.Lock()
		m.steps++
		m.mu.Unlock()
	case observe.EpisodeEnded:
		m.mu.Lock()
		if m.first.IsZero() {
			m.first = m.began
		}
		m.done++
		if e.ScaffoldLoss {
			m.losses++
		}
		m.mu.Unlock()
	case observe.RunEnded:
		m.Close()
	}
}

func (m *Meter) start() {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return
	}
	m.started, m.began = true, m.now()
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(m.opts.Every)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.draw(false)
			}
		}
	}()
}

// Close stops drawing and prints the last line (a terminal's ends with a
// newline). It is idempotent.
func (m *Meter) Close() {
	m.once.Do(func() {
		close(m.stop)
		m.wg.Wait()
		m.mu.Lock()
		started := m.started
		m.mu.Unlock()
		if started {
			m.draw(true)
		}
	})
}

// Line is the progress as one line, as a terminal shows it.
func (m *Meter) Line() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lineLocked(true)
}

func (m *Meter) lineLocked(bar bool) string {
	now := m.now()
	var b strings.Builder
	if bar {
		const width = 24
		fill := 0
		if m.total > 0 {
			fill = int(min(m.done, m.total) * width / m.total)
		}
		fmt.Fprintf(&b, "[%s%s] ", strings.Repeat("#", fill), strings.Repeat(".", width-fill))
	}
	fmt.Fprintf(&b, "%d/%d %s", m.done, m.total, m.opts.Unit)
	if m.before > 0 {
		fmt.Fprintf(&b, " (+%d kept before)", m.before)
	}
	el := now.Sub(m.began)
	if m.opts.Command != "export" {
		fmt.Fprintf(&b, ", %d steps (%.1f/s), losses %d", m.steps, float64(m.steps)/max(el.Seconds(), 1e-9), m.losses)
	} else {
		fmt.Fprintf(&b, " (%.0f/s)", float64(m.done)/max(el.Seconds(), 1e-9))
	}
	if m.live != nil {
		l := m.live()
		fmt.Fprintf(&b, ", replicas %d busy %d idle", l.Busy, l.Idle())
		if l.Standby > 0 {
			fmt.Fprintf(&b, " %d standby", l.Standby)
		}
	}
	fmt.Fprintf(&b, ", %s elapsed", fmtDuration(el))
	if eta, ok := m.etaLocked(now); ok {
		fmt.Fprintf(&b, ", ETA %s", fmtDuration(eta))
	}
	tasks := make([]string, 0, len(m.goldens))
	for t := range m.goldens {
		tasks = append(tasks, t)
	}
	sort.Strings(tasks)
	for i, t := range tasks {
		if i == 2 {
			fmt.Fprintf(&b, "; %d more goldens building", len(tasks)-i)
			break
		}
		g := m.goldens[t]
		fmt.Fprintf(&b, "; golden %s: ", t)
		if g.phase == observe.GoldenSetup {
			fmt.Fprintf(&b, "setup %d/%d %s", g.index+1, g.count, oneLine(g.cmd, 60))
		} else {
			b.WriteString(string(g.phase))
		}
		fmt.Fprintf(&b, " (%s)", fmtDuration(now.Sub(g.began)))
	}
	return b.String()
}

// etaLocked is the time left at the rate episodes ended since the first
// began; unknown until one has ended.
func (m *Meter) etaLocked(now time.Time) (time.Duration, bool) {
	if m.done == 0 || m.first.IsZero() || m.total <= m.done {
		return 0, false
	}
	per := now.Sub(m.first) / time.Duration(m.done)
	return per * time.Duration(m.total-m.done), true
}

func (m *Meter) draw(final bool) {
	m.mu.Lock()
	if final && !m.opts.TTY && m.opts.EndLogged {
		m.mu.Unlock()
		return
	}
	if !m.opts.TTY {
		line := m.lineLocked(false)
		done, total, steps, losses := m.done, m.total, m.steps, m.losses
		m.mu.Unlock()
		m.plain(line, "done", done, "total", total, "steps", steps, "losses", losses, "final", final)
		return
	}
	line := m.lineLocked(true)
	if con, ok := m.w.(*Console); ok {
		m.mu.Unlock()
		if final {
			con.end(line)
		} else {
			con.setStatus(line)
		}
		return
	}
	pad := ""
	if n := m.width - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	m.width = len(line)
	m.mu.Unlock()
	if final {
		m.printf("\r%s%s\n", line, pad)
	} else {
		m.printf("\r%s%s", line, pad)
	}
}

// plain prints a line "collect: ..." (or logs it as a record with attrs).
func (m *Meter) plain(line string, attrs ...any) {
	if m.opts.Logger != nil {
		m.mu.Lock()
		runID := m.runID
		m.mu.Unlock()
		if runID != "" {
			attrs = append(attrs, "run_id", runID)
		}
		m.opts.Logger.Info("progress", append([]any{"line", line}, attrs...)...)
		return
	}
	if m.opts.TTY {
		if con, ok := m.w.(*Console); ok {
			fmt.Fprintf(con, "%s: %s\n", m.opts.Command, line)
			return
		}
		m.mu.Lock()
		m.width = 0
		m.mu.Unlock()
		m.printf("\r%s\n", line)
		return
	}
	m.printf("%s: %s\n", m.opts.Command, line)
}

func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
