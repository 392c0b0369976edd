package progress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/observe"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// clock is a fake time the meter reads.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newMeter(w *syncBuf, o Options) (*Meter, *clock) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m := New(w, o)
	m.now = c.now
	return m, c
}

// While a golden builds, the line says which task, which setup command
// and for how long; the step counter moves with each step, before any
// episode ends; the ETA comes once one has ended, from its rate.
func TestTheLineTellsWhatTheRunIsDoing(t *testing.T) {
	var w syncBuf
	m, c := newMeter(&w, Options{Command: "collect", TTY: true, Every: time.Hour})
	live := observe.Live{Replicas: 4, Busy: 4}
	m.Observe(observe.RunStarted{Command: "collect", RunID: "r", Planned: 12, KeptBefore: 2, Todo: 10, Replicas: 4, Live: func() observe.Live { return live }})
	began := c.now()
	m.Observe(observe.Golden{Task: "web", Phase: observe.GoldenCreate, Began: began})
	m.Observe(observe.Golden{Task: "web", Phase: observe.GoldenSetup, Command: "npm ci  --offline", Index: 1, Commands: 3, Began: began})
	c.add(75 * time.Second)
	line := m.Line()
	assert.Contains(t, line, "golden web: setup 2/3 npm ci --offline (1m15s)")
	assert.Contains(t, line, "0/10 episodes (+2 kept before)")
	assert.NotContains(t, line, "ETA", "no ETA before an episode ended")

	m.Observe(observe.Golden{Task: "web", Phase: observe.GoldenBuilt, Began: began, Took: 75 * time.Second})
	m.Observe(observe.Reset{Task: "web"})
	for i := range 3 {
		m.Observe(observe.Step{Task: "web", Index: i})
	}
	line = m.Line()
	assert.NotContains(t, line, "golden")
	assert.Contains(t, line, "0/10 episodes (+2 kept before), 3 steps", "steps count as they happen")
	assert.Contains(t, line, "replicas 4 busy 0 idle")

	c.add(10 * time.Second)
	m.Observe(observe.EpisodeEnded{Task: "web", Exit: "done", Kept: true})
	m.Observe(observe.EpisodeEnded{Task: "web", Exit: "env_error", ScaffoldLoss: true, Kept: true})
	line = m.Line()
	assert.Contains(t, line, "2/10 episodes")
	assert.Contains(t, line, "losses 1")
	assert.Contains(t, line, "ETA 40s", "8 left at 5s each since the first reset")
	assert.True(t, strings.HasPrefix(line, "[####"), line)
	m.Close()
	assert.True(t, strings.HasSuffix(w.String(), "\n"), "the last terminal line ends the line")
}

// Elsewhere than on a terminal: a plain line per tick, and each setup
// command as it starts; no carriage returns.
func TestPlainLinesWhenNotATerminal(t *testing.T) {
	var w syncBuf
	m, _ := newMeter(&w, Options{Command: "collect", Every: 20 * time.Millisecond})
	m.Observe(observe.RunStarted{Command: "collect", RunID: "r", Planned: 2, Todo: 2, Replicas: 1})
	m.Observe(observe.Golden{Task: "t", Phase: observe.GoldenSetup, Command: "make all", Commands: 1})
	m.Observe(observe.Step{})
	time.Sleep(100 * time.Millisecond)
	m.Observe(observe.RunEnded{Status: "complete"})
	out := w.String()
	require.NotContains(t, out, "\r")
	assert.Contains(t, out, "collect: golden t: setup 1/1: make all\n")
	lines := strings.Count(out, "collect: 0/2 episodes, 1 steps")
	assert.GreaterOrEqual(t, lines, 2, "periodic lines:\n%s", out)
}

// With a logger (JSON logs), the lines are records with the counts and
// the run id.
func TestProgressAsRecords(t *testing.T) {
	var w syncBuf
	log := slog.New(slog.NewJSONHandler(&w, nil))
	m, _ := newMeter(nil, Options{Command: "replay", Logger: log, Every: time.Hour})
	m.Observe(observe.RunStarted{Command: "replay", RunID: "run-7", Todo: 3})
	m.Observe(observe.EpisodeEnded{Kept: true})
	m.Close()
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(w.String())), &rec), w.String())
	assert.Equal(t, "progress", rec["msg"])
	assert.Equal(t, "run-7", rec["run_id"])
	assert.EqualValues(t, 1, rec["done"])
	assert.EqualValues(t, 3, rec["total"])
	assert.Equal(t, true, rec["final"])
}

// Begin and Advance count a command without episodes (export).
func TestBeginAndAdvance(t *testing.T) {
	var w syncBuf
	m, c := newMeter(&w, Options{Command: "export", Every: time.Hour})
	m.Begin(100)
	c.add(2 * time.Second)
	m.Advance(40)
	assert.Contains(t, m.Line(), "40/100 episodes (20/s)")
	assert.Contains(t, m.Line(), "ETA 3s")
	m.Close()
	assert.Contains(t, w.String(), "export: 40/100 episodes")
}

// screen is what a terminal shows after out: "\r" returns to the line's
// start, characters overwrite, "\n" starts a new line.
func screen(out string) []string {
	lines := []string{""}
	col := 0
	for _, r := range out {
		cur := []rune(lines[len(lines)-1])
		switch r {
		case '\r':
			col = 0
		case '\n':
			lines = append(lines, "")
			col = 0
		default:
			if col < len(cur) {
				cur[col] = r
			} else {
				cur = append(cur, r)
			}
			col++
			lines[len(lines)-1] = string(cur)
		}
	}
	return lines
}

// On a terminal the progress line and log records share stderr through a
// Console: a record goes above the line, never onto it, and the line is
// drawn again below it. Records were printed onto the line before
// ("…ETA 14s; golden fix-sum: checkpoint (2s)time=…").
func TestRecordsNeverLandOnTheProgressLine(t *testing.T) {
	var w syncBuf
	con := NewConsole(&w)
	m, _ := newMeter(nil, Options{Command: "collect", TTY: true, Every: time.Hour})
	m.w = con
	log := slog.New(slog.NewTextHandler(con, nil))
	m.Observe(observe.RunStarted{Command: "collect", RunID: "r", Todo: 4})
	m.Observe(observe.Golden{Task: "fix-sum", Phase: observe.GoldenCheckpoint})
	m.draw(false)
	log.Info("golden checkpoint built", "task", "fix-sum")
	m.Observe(observe.Golden{Task: "fix-sum", Phase: observe.GoldenBuilt})
	m.Observe(observe.EpisodeEnded{Kept: true})
	m.draw(false)
	log.Warn("a warning")
	m.Close()
	lines := screen(w.String())
	var records, status int
	for _, l := range lines {
		l = strings.TrimRight(l, " ")
		hasRecord, hasStatus := strings.Contains(l, "msg="), strings.Contains(l, "episodes")
		require.False(t, hasRecord && hasStatus, "a record on the progress line: %q", l)
		if hasRecord {
			records++
		}
		if hasStatus {
			status++
		}
	}
	assert.Equal(t, 2, records, "%q", lines)
	assert.Equal(t, 1, status, "one progress line, the last: %q", lines)
	assert.Contains(t, lines[len(lines)-2], "1/4 episodes")

	// The same sequence on the bare stream, as before: the record lands
	// on the line.
	var raw syncBuf
	m, _ = newMeter(&raw, Options{Command: "collect", TTY: true, Every: time.Hour})
	m.Observe(observe.RunStarted{Command: "collect", RunID: "r", Todo: 4})
	m.draw(false)
	slog.New(slog.NewTextHandler(&raw, nil)).Info("golden checkpoint built")
	joined := false
	for _, l := range screen(raw.String()) {
		joined = joined || (strings.Contains(l, "msg=") && strings.Contains(l, "episodes"))
	}
	assert.True(t, joined, "without the Console the record joins the line")
	m.Close()
}

// Off a terminal, a command that records the run's end itself (collect's
// "run ended" record) gets no last progress line that says it again.
func TestNoLastLineWhenTheEndIsLogged(t *testing.T) {
	var w syncBuf
	m, _ := newMeter(&w, Options{Command: "collect", Every: time.Hour, EndLogged: true})
	m.Observe(observe.RunStarted{Command: "collect", RunID: "r", Todo: 2})
	m.Observe(observe.EpisodeEnded{Kept: true})
	m.Observe(observe.RunEnded{Status: "complete"})
	assert.Empty(t, w.String())
}

// A plan that grows as roots branch grows the total: "30/6 episodes" was
// shown for a branching run.
func TestThePlanGrowsTheTotal(t *testing.T) {
	m, _ := newMeter(&syncBuf{}, Options{Command: "collect", Every: time.Hour})
	m.Observe(observe.RunStarted{Command: "collect", RunID: "r", Todo: 6})
	m.Observe(observe.Planned{Added: 24})
	for range 30 {
		m.Observe(observe.EpisodeEnded{Kept: true})
	}
	assert.Contains(t, m.Line(), "30/30 episodes")
	m.Close()
}

// Golden setup lines come from every replica's goroutine at once; the
// meter writes them one at a time to a writer that is not safe for
// concurrent use (a bytes.Buffer here; the race run found the unguarded
// writes through forkline collect's in-process tests).
func TestSetupLinesFromManyGoroutinesAreWrittenOneAtATime(t *testing.T) {
	var buf bytes.Buffer
	m := New(&buf, Options{Command: "collect", Every: time.Hour})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				m.Observe(observe.Golden{Task: fmt.Sprintf("t%d", i), Phase: observe.GoldenSetup, Command: "true", Index: j, Commands: 20})
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 160)
	for _, l := range lines {
		require.Regexp(t, `^collect: golden t\d: setup \d+/20: true$`, l)
	}
}
