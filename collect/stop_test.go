package collect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/internal/ui"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/task"
)

// outageProvider is the local provider behind a switch that makes it behave
// like a backend whose engine stopped answering: every call, and every
// action of a live sandbox, fails with an error wrapping
// runtime.ErrUnavailable. downAfterForks > 0 throws the switch at that fork.
type outageProvider struct {
	providers.Provider
	o *outage
}

type outage struct {
	down           atomic.Bool
	downAfterForks atomic.Int64
	forks, creates atomic.Int64
}

var theOutage = &outage{}

const outageName = "outage-local"

var errEngineGone = fmt.Errorf("outage: the engine stopped answering: %w", runtime.ErrUnavailable)

func init() {
	providers.Register(outageName, func(ctx context.Context, opts providers.Options) (providers.Provider, error) {
		inner, err := providers.Open(ctx, "local", opts)
		if err != nil {
			return nil, err
		}
		return &outageProvider{inner, theOutage}, nil
	})
}

func (p *outageProvider) Name() string { return outageName }

func (p *outageProvider) Create(ctx context.Context, spec providers.Spec) (providers.Sandbox, error) {
	p.o.creates.Add(1)
	if p.o.down.Load() {
		return nil, errEngineGone
	}
	sb, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &outageSandbox{sb, p.o}, nil
}

func (p *outageProvider) Checkpoint(ctx context.Context, sb providers.Sandbox, label string) (providers.Checkpoint, error) {
	if p.o.down.Load() {
		return providers.Checkpoint{}, errEngineGone
	}
	return p.Provider.Checkpoint(ctx, sb.(*outageSandbox).Sandbox, label)
}

func (p *outageProvider) Fork(ctx context.Context, cp providers.Checkpoint) (providers.Sandbox, error) {
	if n := p.o.forks.Add(1); p.o.downAfterForks.Load() > 0 && n > p.o.downAfterForks.Load() {
		p.o.down.Store(true)
	}
	if p.o.down.Load() {
		return nil, errEngineGone
	}
	sb, err := p.Provider.Fork(ctx, cp)
	if err != nil {
		return nil, err
	}
	return &outageSandbox{sb, p.o}, nil
}

type outageSandbox struct {
	providers.Sandbox
	o *outage
}

func (s *outageSandbox) Act(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	if s.o.down.Load() {
		return runtime.Observation{}, errEngineGone
	}
	return s.Sandbox.Act(ctx, a)
}

func (o *outage) reset() {
	o.down.Store(false)
	o.downAfterForks.Store(0)
	o.forks.Store(0)
	o.creates.Store(0)
}

const stepsTask = `id: steps
instruction: a few steps, then verify
setup:
  - echo ready > state
solution:
  - {kind: exec, cmd: sleep 0.1}
  - {kind: exec, cmd: sleep 0.1}
  - {kind: exec, cmd: cat state}
  - {kind: done}
verify:
  cmd: grep -q ready state
  reward: exit
`

// syncBuffer is a log sink the episodes write to concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// plannedIDs derives the planned episode ids of a one-task run.
func plannedIDs(t *testing.T, out, taskID string, repeats int) []string {
	t.Helper()
	ds, err := shard.Open(out)
	require.NoError(t, err)
	hashes, err := task.RecordHashes(ds.Manifest().Tasks)
	require.NoError(t, err)
	var ids []string
	for r := range repeats {
		ids = append(ids, EpisodeID(taskID, hashes[taskID], r, 0))
	}
	sort.Strings(ids)
	return ids
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The backend goes away mid-run: the episodes it ends are not recorded as
// env_error but left out, scheduling stops, the run ends partial with
// ErrUnavailable; once the backend is back, a resume ends complete with
// exactly the planned episodes, none twice.
func TestBackendGoneMidRunThenResume(t *testing.T) {
	theOutage.reset()
	t.Cleanup(theOutage.reset)
	spec := filepath.Join(t.TempDir(), "steps.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(stepsTask), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Provider, cfg.Replicas, cfg.Repeats = outageName, 2, 12
	var log syncBuffer
	cfg.Logger = textLogger(&log)
	const upForks = 4
	theOutage.downAfterForks.Store(upForks)

	sum, err := Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, runtime.ErrUnavailable, "the cause is kept")
	require.Equal(t, "partial", sum.Status)
	rep := sum.Report()
	require.Positive(t, rep.NotRun, "the episodes the outage ended are counted, not kept")
	require.Zero(t, rep.ByExit["env_error"], "none is recorded as a finished episode")
	// Scheduling stopped: besides the forks before the outage, only the
	// jobs in flight (one per replica, and at most one the pool took as
	// scheduling stopped, which never starts) tried their 3 attempts each.
	// Scheduling on would have tried 3 per remaining job (28 in all).
	require.LessOrEqual(t, theOutage.forks.Load(), int64(upForks+(cfg.Replicas+1)*3),
		"no new episodes are scheduled once the backend is gone")
	require.LessOrEqual(t, rep.NotRun, cfg.Replicas, "only episodes in flight met the outage")
	require.Equal(t, 1, strings.Count(log.String(), "a service the episodes depend on is unavailable"), "said once:\n%s", log.String())

	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusPartial, ds.Manifest().Status)
	eps, _, _ := readAll(t, cfg.Out)
	require.Less(t, len(eps), 12)
	for _, e := range eps {
		require.Equal(t, "done", e.ExitReason, "only whole episodes are kept: %s", e.Detail)
	}
	before := len(eps)

	// The engine is back.
	theOutage.reset()
	cfg.Resume = true
	log = syncBuffer{}
	sum, err = Run(context.Background(), cfg)
	require.NoError(t, err, log.String())
	rep = sum.Report()
	require.Equal(t, "complete", rep.Status)
	require.Equal(t, 12, rep.Episodes, "the summary covers the whole dataset")
	require.Equal(t, before, rep.Skipped)
	require.Equal(t, 12-before, rep.Ran)
	require.EqualValues(t, 12*4, rep.Steps)
	require.Equal(t, 12, rep.Rewarded)
	require.Equal(t, 1.0, *rep.RewardMean)
	eps, steps, _ := readAll(t, cfg.Out)
	require.Equal(t, plannedIDs(t, cfg.Out, "steps", 12), sortedKeys(eps), "exactly the planned episodes, none twice")
	for id, e := range eps {
		require.Equal(t, "done", e.ExitReason)
		require.Len(t, steps[id], 4)
	}
	vr, err := shard.Verify(cfg.Out)
	require.NoError(t, err)
	require.True(t, vr.OK(), "%+v", vr)
}

// The backend is gone from the start: the golden build fails with an
// unavailable error, which is the run's failure: nothing is kept, the run
// is partial, and a resume once the backend is back completes it.
func TestBackendGoneBeforeTheGoldenThenResume(t *testing.T) {
	theOutage.reset()
	t.Cleanup(theOutage.reset)
	spec := filepath.Join(t.TempDir(), "steps.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(stepsTask), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Provider, cfg.Replicas, cfg.Repeats = outageName, 2, 6
	theOutage.down.Store(true)

	sum, err := Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorContains(t, err, "golden for steps")
	rep := sum.Report()
	require.Zero(t, rep.Episodes)
	require.Positive(t, rep.NotRun)
	require.LessOrEqual(t, rep.NotRun, cfg.Replicas, "scheduling stopped: only the jobs in flight met the outage")
	require.EqualValues(t, 1, theOutage.creates.Load(), "the failed golden is not rebuilt per episode")
	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusPartial, ds.Manifest().Status)
	require.Zero(t, ds.Manifest().Counts["episodes"])

	theOutage.reset()
	cfg.Resume = true
	sum, err = Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 6, sum.Report().Episodes)
	eps, _, _ := readAll(t, cfg.Out)
	require.Equal(t, plannedIDs(t, cfg.Out, "steps", 6), sortedKeys(eps))
}

const brokenTask = `id: broken
instruction: never starts
setup:
  - echo preparing; echo 'no such database' >&2; exit 7
solution:
  - {kind: done}
`

// A run where nothing worked is complete (every planned episode kept) but
// says so with ErrAllLost, and its identical errors are logged once and
// counted.
func TestEveryEpisodeLostIsReportedOnceWithACount(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "broken.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(brokenTask), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Repeats = 6
	var log syncBuffer
	cfg.Logger = textLogger(&log)
	sum, err := Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrAllLost)
	rep := sum.Report()
	require.Equal(t, "complete", rep.Status, "complete still means every planned episode kept")
	require.Equal(t, 6, rep.Losses)
	require.Len(t, rep.Errors, 1)
	require.Equal(t, 6, rep.Errors[0].Episodes)
	require.Equal(t, "env_error", rep.Errors[0].ExitReason)
	require.Contains(t, rep.Errors[0].String(), "6 episodes: env_error: golden build failed: pool: golden for broken@")
	logged := log.String()
	require.Equal(t, 1, strings.Count(logged, "msg=\"episode "), "the error is logged once, not per episode:\n%s", logged)
	require.Contains(t, logged, "msg=\"6 episodes: env_error: ")
	var printed bytes.Buffer
	ui.WriteCollect(&printed, rep, "")
	require.Contains(t, printed.String(), "6 episodes: env_error: golden build failed")
	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, ds.Manifest().Status)
}

// -max-loss stops scheduling once this invocation's losses pass it; what
// ran is kept, the run is partial and a resume continues it.
func TestMaxLossStopsTheRun(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "broken.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(brokenTask), 0o644))
	for _, limit := range []string{"2", "20%"} { // 20% of 10 episodes: more than 2 losses
		t.Run(limit, func(t *testing.T) {
			cfg := baseConfig(t, spec)
			cfg.Repeats, cfg.Replicas = 10, 1
			var err error
			cfg.MaxLoss, err = ParseLossLimit(limit)
			require.NoError(t, err)
			sum, err := Run(context.Background(), cfg)
			require.ErrorIs(t, err, ErrMaxLoss)
			require.Equal(t, "partial", sum.Status)
			rep := sum.Report()
			require.Equal(t, 3, rep.Episodes, "the third loss passes the limit; nothing more is scheduled")
			ds, err := shard.Open(cfg.Out)
			require.NoError(t, err)
			require.Equal(t, shard.StatusPartial, ds.Manifest().Status)
			require.EqualValues(t, 3, ds.Manifest().Counts["episodes"])

			cfg.Resume, cfg.MaxLoss = true, LossLimit{}
			sum, err = Run(context.Background(), cfg)
			require.ErrorIs(t, err, ErrAllLost, "resumed without a limit, it completes: all lost")
			require.Equal(t, 10, sum.Report().Episodes)
			eps, _, _ := readAll(t, cfg.Out)
			require.Equal(t, plannedIDs(t, cfg.Out, "broken", 10), sortedKeys(eps))
		})
	}
}

func TestParseLossLimit(t *testing.T) {
	for s, want := range map[string]struct {
		losses, todo int
		passed       bool
	}{
		"0": {1, 10, true}, "3": {3, 10, false}, "3 ": {4, 10, true},
		"10%": {1, 10, false}, "10.0%": {2, 10, true}, "0%": {1, 1000, true}, "100%": {10, 10, false},
	} {
		l, err := ParseLossLimit(s)
		require.NoError(t, err, s)
		require.Equal(t, want.passed, l.passed(want.losses, want.todo), s)
	}
	for _, bad := range []string{"-1", "x", "101%", "-5%", "NaN%", "1.5", "%"} {
		_, err := ParseLossLimit(bad)
		require.ErrorContains(t, err, "MaxLoss "+bad, bad)
		require.ErrorContains(t, err, "0 <= F <= 100", bad)
	}
	l, _ := ParseLossLimit("")
	require.False(t, l.IsSet())
	require.False(t, l.passed(1e6, 1))
}

// A full disk breaks the writer: scheduling stops at the first write
// error, so at most the episodes already in flight run after it (it used
// to go on scheduling and throw away about 30 more).
func TestWriteErrorStopsScheduling(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a disk")
	}
	disk := t.TempDir()
	// Mounting needs the same privilege as overlay forks.
	testenv.Need(t, testenv.Overlay, func() error {
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1536k", "tmpfs", disk).CombinedOutput(); err != nil {
			return fmt.Errorf("cannot mount a small tmpfs to fill: %v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	})
	t.Cleanup(func() { syscall.Unmount(disk, syscall.MNT_DETACH) })
	marks := filepath.Join(t.TempDir(), "marks")
	spec := filepath.Join(t.TempDir(), "big.yaml")
	// Each episode leaves a mark on the host (local is not a boundary) and
	// prints ~120 KB that does not compress.
	require.NoError(t, os.WriteFile(spec, []byte(`id: big
instruction: print a lot
solution:
  - {kind: exec, cmd: 'echo x >> `+marks+`; head -c 90000 /dev/urandom | base64'}
  - {kind: done}
`), 0o644))
	cfg := baseConfig(t, spec)
	cfg.Out = filepath.Join(disk, "run")
	cfg.Replicas, cfg.Repeats = 2, 60
	cfg.Shards = shard.Config{RollBytes: 1} // every episode closes a generation
	countMarks := func() int {
		b, _ := os.ReadFile(marks)
		return bytes.Count(b, []byte("\n"))
	}
	atFailure := -1
	var mu sync.Mutex
	cfg.Logger = textLogger(writerFunc(func(p []byte) {
		mu.Lock()
		defer mu.Unlock()
		if atFailure < 0 && bytes.Contains(p, []byte("could not be written")) {
			atFailure = countMarks()
		}
	}))
	_, err := Run(context.Background(), cfg)
	require.Error(t, err)
	require.True(t, errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left"), "%v", err)
	require.GreaterOrEqual(t, atFailure, 1, "the disk filled during the run")
	ran := countMarks()
	t.Logf("%d episodes had started at the first write error, %d in all", atFailure, ran)
	require.Less(t, ran, 60, "the disk filled before the end")
	require.LessOrEqual(t, ran-atFailure, cfg.Replicas,
		"after the first write error only the episodes in flight ran (%d episodes started at the error, %d in all)", atFailure, ran)
}

type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// textLogger logs every record as text to w (Config.Logger).
func textLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
