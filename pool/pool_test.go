package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// fakeProvider keeps sandboxes in memory: a sandbox is a map of files, a
// command "touch F" writes F, "fail" exits 1, "break" breaks the sandbox.
type fakeProvider struct {
	canCheckpoint bool
	forksMemory   bool         // claim Capabilities().ForksMemory
	ran           atomic.Int32 // commands run, over every sandbox
	creates       atomic.Int32
	forks         atomic.Int32
	failForks     atomic.Int32 // fail this many forks first
	// forkHook, when set, runs before every fork; its error fails the fork.
	forkHook func(ctx context.Context) error
	// closeHook, when set, runs at the start of every sandbox's Close.
	closeHook func()
	mu        sync.Mutex
	open      map[*fakeSandbox]bool
	released  []string // checkpoint ids, in Release order
}

type fakeSandbox struct {
	p      *fakeProvider
	files  map[string]bool
	origin string
}

func newFake(checkpoint bool) *fakeProvider {
	return &fakeProvider{canCheckpoint: checkpoint, open: map[*fakeSandbox]bool{}}
}

func (f *fakeProvider) Name() string { return "fake" }
func (f *fakeProvider) Capabilities() providers.Capabilities {
	return providers.Capabilities{Checkpoint: f.canCheckpoint, Fork: f.canCheckpoint, ForksMemory: f.forksMemory}
}
func (f *fakeProvider) track(s *fakeSandbox) *fakeSandbox {
	f.mu.Lock()
	f.open[s] = true
	f.mu.Unlock()
	return s
}
func (f *fakeProvider) Create(ctx context.Context, spec providers.Spec) (providers.Sandbox, error) {
	f.creates.Add(1)
	return f.track(&fakeSandbox{p: f, files: map[string]bool{}, origin: "create"}), nil
}
func (f *fakeProvider) Checkpoint(ctx context.Context, sb providers.Sandbox, label string) (providers.Checkpoint, error) {
	files := []string{}
	for k := range sb.(*fakeSandbox).files {
		files = append(files, k)
	}
	return providers.Checkpoint{ID: strings.Join(files, ","), Provider: "fake"}, nil
}
func (f *fakeProvider) Fork(ctx context.Context, cp providers.Checkpoint) (providers.Sandbox, error) {
	if f.failForks.Add(-1) >= 0 {
		return nil, errors.New("fork failed")
	}
	if f.forkHook != nil {
		if err := f.forkHook(ctx); err != nil {
			return nil, err
		}
	}
	f.forks.Add(1)
	s := &fakeSandbox{p: f, files: map[string]bool{}, origin: "fork"}
	for _, k := range strings.Split(cp.ID, ",") {
		if k != "" {
			s.files[k] = true
		}
	}
	return f.track(s), nil
}
func (f *fakeProvider) Release(ctx context.Context, cp providers.Checkpoint) error {
	f.mu.Lock()
	f.released = append(f.released, cp.ID)
	f.mu.Unlock()
	return nil
}
func (f *fakeProvider) Close(ctx context.Context) error { return nil }
func (f *fakeProvider) openCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.open)
}

func (s *fakeSandbox) Act(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	s.p.ran.Add(1)
	switch {
	case a.Cmd == "fail":
		return runtime.Observation{Output: []byte("boom"), ExitCode: 1, Error: true}, nil
	case strings.HasPrefix(a.Cmd, "touch "):
		s.files[strings.TrimPrefix(a.Cmd, "touch ")] = true
	}
	return runtime.Observation{}, nil
}
func (s *fakeSandbox) Close(context.Context) error {
	if s.p.closeHook != nil {
		s.p.closeHook()
	}
	s.p.mu.Lock()
	delete(s.p.open, s)
	s.p.mu.Unlock()
	return nil
}
func (s *fakeSandbox) Info() providers.SandboxInfo { return providers.SandboxInfo{Origin: s.origin} }

func feed(jobs ...Job) <-chan Job {
	ch := make(chan Job, len(jobs))
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	return ch
}

func TestGoldenOnceForksPerEpisode(t *testing.T) {
	f := newFake(true)
	p, err := New(Config{Provider: f, Replicas: 3})
	require.NoError(t, err)
	require.Equal(t, Fork, p.Strategy())
	tmpl := &Template{Key: "t", Setup: []string{"touch built"}, Start: []string{"touch started"}}
	var jobs []Job
	for range 10 {
		jobs = append(jobs, Job{Template: tmpl})
	}
	// The episode function runs on the pool's worker goroutines, where
	// require's t.FailNow must not be called: it records, the test checks.
	got := collectReplicas(t, p, context.Background(), jobs)
	require.Len(t, got, 10)
	for _, g := range got {
		require.NoError(t, g.err)
		require.True(t, g.files["built"] && g.files["started"], "setup reached the golden and start ran in the fork")
		require.Equal(t, Fork, g.r.Strategy)
		require.NotNil(t, g.r.Golden)
	}
	require.EqualValues(t, 1, f.creates.Load(), "one golden build")
	require.EqualValues(t, 10, f.forks.Load())
	require.Equal(t, 0, f.openCount(), "every replica is closed after its episode")
	require.NoError(t, p.Close(context.Background()))
}

func TestAutoFallsBackLoudlyAndForkRefuses(t *testing.T) {
	var logs []string
	p, err := New(Config{Provider: newFake(false), Log: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
	require.NoError(t, err)
	require.Equal(t, Recreate, p.Strategy())
	require.Len(t, logs, 1)
	require.Contains(t, logs[0], "cannot checkpoint")
	_, err = New(Config{Provider: newFake(false), Strategy: Fork})
	require.ErrorContains(t, err, "cannot checkpoint")
}

func TestFailedResetIsReplacedAndBrokenGoldenFailsFast(t *testing.T) {
	f := newFake(true)
	f.failForks.Store(2)
	p, err := New(Config{Provider: f, Replicas: 1, MaxAttempts: 3})
	require.NoError(t, err)
	good := &Template{Key: "good"}
	bad := &Template{Key: "bad", Setup: []string{"fail"}}
	results := map[string][]string{}
	p.Run(context.Background(), feed(Job{Template: good}, Job{Template: bad}, Job{Template: bad}), func(ctx context.Context, j Job, r Replica, err error) Outcome {
		if err != nil {
			results[j.Template.Key] = append(results[j.Template.Key], err.Error())
		} else {
			results[j.Template.Key] = append(results[j.Template.Key], fmt.Sprintf("ok attempt %d", r.Attempt))
		}
		return Done
	})
	require.Equal(t, []string{"ok attempt 3"}, results["good"], "two failed forks were replaced")
	require.Len(t, results["bad"], 2)
	for _, e := range results["bad"] {
		require.Contains(t, e, `setup[0] "fail": exit code 1`)
		require.Contains(t, e, "boom")
	}
	require.EqualValues(t, 2, f.creates.Load(), "the broken golden was built once, not per episode")
	require.Equal(t, 2, p.Stats().Replacements)
}

func TestStandbyHandsOffPreparedReplicas(t *testing.T) {
	f := newFake(true)
	p, err := New(Config{Provider: f, Replicas: 1, Standby: 2})
	require.NoError(t, err)
	tmpl := &Template{Key: "t", Start: []string{"touch started"}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Expect(ctx, tmpl, 5)
	// Wait until the standby is full, so the first job must be a hand-off.
	require.Eventually(t, func() bool { return p.standbys["t"].readyCount() == 2 }, 5*time.Second, time.Millisecond)
	var jobs []Job
	for range 5 {
		jobs = append(jobs, Job{Template: tmpl})
	}
	standby := 0
	for _, g := range collectReplicas(t, p, ctx, jobs) {
		require.NoError(t, g.err)
		require.True(t, g.files["started"])
		if g.r.Standby {
			standby++
			require.Positive(t, g.r.Prepared)
		}
	}
	require.Positive(t, standby, "some resets were hand-offs")
	require.NoError(t, p.Close(context.Background()))
	require.EqualValues(t, 5, f.forks.Load(), "no replica was forked beyond the expected jobs")
	require.Equal(t, 0, f.openCount(), "standby leftovers are closed")
}

// TestStandbyBudgetServesThePlanInOrder: under a pool-wide budget the
// replicas prepared are those of the next jobs in order: a's while a's jobs
// come first, b's once they enter the window; no template makes more than
// its jobs.
func TestStandbyBudgetServesThePlanInOrder(t *testing.T) {
	f := newFake(true)
	p, err := New(Config{Provider: f, Replicas: 1, Standby: 3, StandbyBudget: 2})
	require.NoError(t, err)
	a, b := &Template{Key: "a"}, &Template{Key: "b"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.ExpectInOrder(ctx, []*Template{a, a, a, b, b, b})
	require.Eventually(t, func() bool { return p.readyStandbys("a") == 2 }, 5*time.Second, time.Millisecond)
	require.Zero(t, p.readyStandbys("b"), "b's jobs are not among the next two")
	require.Len(t, collectReplicas(t, p, ctx, []Job{{Template: a}}), 1)
	require.Eventually(t, func() bool { return p.readyStandbys("a") == 2 }, 5*time.Second, time.Millisecond)
	require.Zero(t, p.readyStandbys("b"), "the window moved to a's third job, not to b")
	for _, g := range collectReplicas(t, p, ctx, []Job{{Template: a}, {Template: a}}) {
		require.True(t, g.r.Standby)
	}
	require.Eventually(t, func() bool { return p.readyStandbys("b") == 2 }, 5*time.Second, time.Millisecond,
		"once a's jobs are served, b takes the budget")
	for _, g := range collectReplicas(t, p, ctx, []Job{{Template: b}, {Template: b}, {Template: b}}) {
		require.NoError(t, g.err)
	}
	require.NoError(t, p.Close(context.Background()))
	require.EqualValues(t, 6, f.forks.Load(), "one fork per job, none for nothing")
}

// TestStandbyWindowFollowsAnAlternatingPlan: a plan that alternates tasks
// (a, b, a, b, ...) under a budget of 2 prepares one of each, not two of
// the task named first.
func TestStandbyWindowFollowsAnAlternatingPlan(t *testing.T) {
	f := newFake(true)
	p, err := New(Config{Provider: f, Replicas: 1, Standby: 2, StandbyBudget: 2})
	require.NoError(t, err)
	a, b := &Template{Key: "a"}, &Template{Key: "b"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.ExpectInOrder(ctx, []*Template{a, b, a, b, a, b})
	require.Eventually(t, func() bool { return p.readyStandbys("a") == 1 && p.readyStandbys("b") == 1 }, 5*time.Second, time.Millisecond)
	// One job at a time, each once its replica is ready: the point is
	// which templates are prepared, not how fast the filler runs.
	for i := range 6 {
		tmpl := []*Template{a, b}[i%2]
		require.Eventually(t, func() bool { return p.readyStandbys(tmpl.Key) == 1 }, 5*time.Second, time.Millisecond,
			"job %d's replica (%s) is prepared: the window holds one of each", i, tmpl.Key)
		got := collectReplicas(t, p, ctx, []Job{{Template: tmpl}})
		require.Len(t, got, 1)
		require.NoError(t, got[0].err)
		require.True(t, got[0].r.Standby, "job %d was handed a prepared replica", i)
	}
	require.NoError(t, p.Close(context.Background()))
	require.EqualValues(t, 6, f.forks.Load())
	require.Equal(t, 0, f.openCount())
}

// TestJobWaitsForTheReplicaInTheMaking: a job that finds no ready replica
// while the standby is making one claims that one instead of forking cold.
// Forking cold beside it left the made replica with no job at the end of a
// run: one fork for nothing (seen as 6 forks for 5 jobs).
func TestJobWaitsForTheReplicaInTheMaking(t *testing.T) {
	f := newFake(true)
	gate := make(chan struct{})
	entered := make(chan struct{}, 8)
	f.forkHook = func(ctx context.Context) error {
		entered <- struct{}{}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p, err := New(Config{Provider: f, Replicas: 1, Standby: 1})
	require.NoError(t, err)
	tmpl := &Template{Key: "t"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Expect(ctx, tmpl, 1)
	<-entered // the standby is making the one replica the job will need
	done := make(chan []ran)
	go func() { done <- collectReplicas(t, p, ctx, []Job{{Template: tmpl}}) }()
	select {
	case <-entered:
		t.Fatal("the job forked cold beside the replica being made for it")
	case <-time.After(200 * time.Millisecond):
	}
	close(gate)
	got := <-done
	require.Len(t, got, 1)
	require.NoError(t, got[0].err)
	require.True(t, got[0].r.Standby, "the job was handed the replica it waited for")
	require.NoError(t, p.Close(context.Background()))
	require.EqualValues(t, 1, f.forks.Load(), "one job, one fork")
	require.Equal(t, 0, f.openCount())
}

// TestWaitingJobForksColdWhenTheMakingFails: the claimed replica's fork
// fails, so the waiting job is released to make its own.
func TestWaitingJobForksColdWhenTheMakingFails(t *testing.T) {
	f := newFake(true)
	gate := make(chan struct{})
	entered := make(chan struct{}, 8)
	var n atomic.Int32
	f.forkHook = func(ctx context.Context) error {
		if n.Add(1) > 1 {
			return nil // the cold fork after the failure
		}
		entered <- struct{}{}
		<-gate
		return errors.New("fork failed")
	}
	p, err := New(Config{Provider: f, Replicas: 1, Standby: 1, Log: func(string, ...any) {}})
	require.NoError(t, err)
	tmpl := &Template{Key: "t"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Expect(ctx, tmpl, 1)
	<-entered
	done := make(chan []ran)
	go func() { done <- collectReplicas(t, p, ctx, []Job{{Template: tmpl}}) }()
	time.Sleep(50 * time.Millisecond) // let the job claim the replica in the making
	close(gate)
	got := <-done
	require.Len(t, got, 1)
	require.NoError(t, got[0].err)
	require.False(t, got[0].r.Standby, "the job made its own replica")
	require.NoError(t, p.Close(context.Background()))
	require.Equal(t, 0, f.openCount())
}

// ran is what the episode function was given, recorded for the test
// goroutine to check.
type ran struct {
	r     Replica
	err   error
	files map[string]bool // the fake sandbox's files, when there was one
}

// collectReplicas runs jobs and returns what each episode was given, in the
// order the episodes ran. The episode function runs on the pool's worker
// goroutines, so it only records: require (t.FailNow) must be called from
// the test goroutine.
func collectReplicas(t *testing.T, p *Pool, ctx context.Context, jobs []Job) []ran {
	t.Helper()
	var mu sync.Mutex
	var out []ran
	p.Run(ctx, feed(jobs...), func(ctx context.Context, j Job, r Replica, err error) Outcome {
		g := ran{r: r, err: err}
		if fs, ok := r.Sandbox.(*fakeSandbox); ok {
			g.files = maps.Clone(fs.files)
		}
		mu.Lock()
		out = append(out, g)
		mu.Unlock()
		return Done
	})
	return out
}

type jobCtxKey struct{}

// waitUntil polls cond for up to 5 s; it reports whether cond came true.
// It is for the provider's goroutines, which must not fail the test.
func waitUntil(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

func (p *Pool) readyStandbys(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sb := p.standbys[key]; sb != nil {
		return sb.readyCount()
	}
	return 0
}

// TestRetryLeavesTheStandbyAlone: a job whose first reset fails retries
// with a replica made now, and leaves the standby's ready replica for the
// next job. Each retry used to take from the standby again: it counted the
// job once more (so the standby stopped preparing for jobs still to come)
// and destroyed the ready replica, so the next job reset cold.
func TestRetryLeavesTheStandbyAlone(t *testing.T) {
	f := newFake(true)
	p, err := New(Config{Provider: f, Replicas: 1, Standby: 1, MaxAttempts: 3})
	require.NoError(t, err)
	tmpl := &Template{Key: "t"}
	fillCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var jobForks atomic.Int32
	f.forkHook = func(ctx context.Context) error {
		if ctx.Value(jobCtxKey{}) == nil {
			return nil // the standby filler
		}
		if jobForks.Add(1) == 1 {
			// The first job's first reset is cold: the second job is
			// expected only now, so no replica was in the making for the
			// first to wait for. Let the standby make the second job's
			// replica, and fail once it is ready, so the job retries while
			// a standby replica waits.
			p.Expect(fillCtx, tmpl, 1)
			if !waitUntil(func() bool { return p.readyStandbys("t") == 1 }) {
				return errors.New("the standby never got ready")
			}
			return errors.New("fork failed")
		}
		return nil
	}
	jobCtx := context.WithValue(context.Background(), jobCtxKey{}, true)
	got := collectReplicas(t, p, jobCtx, []Job{{Template: tmpl}, {Template: tmpl}})
	require.NoError(t, p.Close(context.Background()))

	require.Len(t, got, 2)
	for _, g := range got {
		require.NoError(t, g.err)
	}
	require.Equal(t, 2, got[0].r.Attempt, "the first job's first reset failed and its retry worked")
	require.False(t, got[0].r.Standby, "the retry made its replica now")
	require.True(t, got[1].r.Standby, "the second job got the replica the standby had ready")
	require.EqualValues(t, 2, f.forks.Load(), "two forks for two jobs: the standby's and the retry's, none destroyed unused")
	require.Equal(t, 0, f.openCount())
}

// A recreated sandbox runs setup and its episode in one sandbox, so a
// template whose setup has a network of its own is refused, not run on it.
func TestRecreateRefusesASetupNetwork(t *testing.T) {
	p, err := New(Config{Provider: newFake(false), Strategy: Recreate})
	require.NoError(t, err)
	tmpl := &Template{Key: "t", Spec: providers.Spec{SetupNetwork: "host", Resources: providers.Resources{Network: "none"}}}
	require.ErrorIs(t, p.Check(tmpl), ErrSetupNetworkRecreate)
	_, err = p.acquire(t.Context(), tmpl)
	require.ErrorIs(t, err, ErrSetupNetworkRecreate)
	require.NoError(t, p.Check(&Template{Key: "u", Spec: providers.Spec{SetupNetwork: "none", Resources: providers.Resources{Network: "none"}}}), "the same network is no conflict")

	f, err := New(Config{Provider: newFake(true), Strategy: Fork})
	require.NoError(t, err)
	require.NoError(t, f.Check(tmpl), "a fork gets the episodes' network")
}

// On a provider whose checkpoints hold processes, start runs once, in the
// golden before its checkpoint, and its effect reaches every fork; no fork
// runs it again, a branch runs neither it nor branch_start; a recreated
// replica, which inherits nothing, runs setup and start itself.
func TestMemoryForksRunStartOnceInTheGolden(t *testing.T) {
	f := newFake(true)
	f.forksMemory = true
	p, err := New(Config{Provider: f, Replicas: 2})
	require.NoError(t, err)
	tmpl := &Template{Key: "t", Setup: []string{"touch built"}, Start: []string{"touch started"}, BranchStart: []string{"touch branched"}}
	var jobs []Job
	for range 5 {
		jobs = append(jobs, Job{Template: tmpl})
	}
	for _, g := range collectReplicas(t, p, context.Background(), jobs) {
		require.NoError(t, g.err)
		require.Equal(t, map[string]bool{"built": true, "started": true}, g.files, "the golden's setup and start came with the fork")
	}
	require.EqualValues(t, 2, f.ran.Load(), "setup and start ran once each, in the golden; no fork ran a command")
	require.EqualValues(t, 1, f.creates.Load())

	r, err := p.acquire(t.Context(), tmpl)
	require.NoError(t, err)
	touch(t, r, "step1")
	b, err := p.Checkpoint(t.Context(), r, "bp", 0)
	require.NoError(t, err)
	before := f.ran.Load()
	br, err := p.ForkBranch(t.Context(), b)
	require.NoError(t, err)
	require.Equal(t, before, f.ran.Load(), "no command ran in the branch")
	require.Equal(t, map[string]bool{"built": true, "started": true, "step1": true}, br.Sandbox.(*fakeSandbox).files)
	require.NoError(t, br.Sandbox.Close(t.Context()))
	require.NoError(t, r.Sandbox.Close(t.Context()))
	require.NoError(t, p.Close(context.Background()))

	f.ran.Store(0)
	q, err := New(Config{Provider: f, Strategy: Recreate})
	require.NoError(t, err)
	for _, g := range collectReplicas(t, q, context.Background(), []Job{{Template: tmpl}, {Template: tmpl}}) {
		require.NoError(t, g.err)
		require.Equal(t, map[string]bool{"built": true, "started": true}, g.files)
	}
	require.EqualValues(t, 4, f.ran.Load(), "recreating: setup and start in each of the two replicas")
	require.NoError(t, q.Close(context.Background()))
}

// storeFake is a fakeProvider that has a stored golden for one label.
type storeFake struct {
	*fakeProvider
	label string
	asked atomic.Int32
}

func (s *storeFake) StoredGolden(ctx context.Context, spec providers.Spec, label string) (providers.Checkpoint, bool, error) {
	s.asked.Add(1)
	if label != s.label {
		return providers.Checkpoint{}, false, nil
	}
	return providers.Checkpoint{ID: "stored", Provider: "fake"}, true, nil
}

// A provider that keeps goldens across runs (providers.GoldenStore) is
// asked first: a stored golden is forked, never built; a template without
// one is built as usual.
func TestStoredGoldenIsNotBuilt(t *testing.T) {
	f := &storeFake{fakeProvider: newFake(true), label: "kept"}
	p, err := New(Config{Provider: f, Replicas: 1})
	require.NoError(t, err)
	kept := &Template{Key: "kept", Setup: []string{"touch built"}}
	other := &Template{Key: "other", Setup: []string{"touch built"}}
	got := collectReplicas(t, p, context.Background(), []Job{{Template: kept}, {Template: other}})
	require.Len(t, got, 2)
	for _, g := range got {
		require.NoError(t, g.err)
		if g.r.Golden.Checkpoint.ID == "stored" {
			require.True(t, g.r.Golden.Stored)
			require.Equal(t, map[string]bool{"stored": true}, g.files, "forked from the stored golden, no setup ran")
		} else {
			require.False(t, g.r.Golden.Stored)
			require.True(t, g.files["built"])
		}
	}
	require.EqualValues(t, 1, f.creates.Load(), "only the template without a stored golden was built")
	require.EqualValues(t, 2, f.asked.Load())
	require.NoError(t, p.Close(context.Background()))
}

// A job the pool took before scheduling stopped, but had not started, is
// never started once it has: it builds no golden and runs no episode (the
// caller finds it missing, and a resume runs it). Before, after Ctrl-C
// collect still built the next task's golden when a slot freed.
func TestAJobNotStartedWhenSchedulingStopsNeverStarts(t *testing.T) {
	f := newFake(true)
	p, err := New(Config{Provider: f, Replicas: 1})
	require.NoError(t, err)
	first := &Template{Key: "first", Setup: []string{"touch a"}}
	second := &Template{Key: "second", Setup: []string{"touch b"}}
	sched, stop := context.WithCancel(context.Background())
	running := make(chan struct{})
	release := make(chan struct{})
	var ran []string
	var mu sync.Mutex
	jobs := make(chan Job, 2)
	jobs <- Job{Template: first}
	jobs <- Job{Template: second}
	close(jobs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.RunScheduled(context.Background(), sched, jobs, func(ctx context.Context, job Job, r Replica, err error) Outcome {
			mu.Lock()
			ran = append(ran, job.Template.Key)
			mu.Unlock()
			if job.Template == first {
				close(running)
				<-release
			}
			if r.Sandbox != nil {
				r.Sandbox.Close(ctx)
			}
			return Done
		})
	}()
	<-running
	// Stop scheduling while the second job waits for the one replica,
	// then let the first episode finish.
	stop()
	close(release)
	<-done
	require.Equal(t, []string{"first"}, ran, "the waiting job never started")
	require.EqualValues(t, 1, f.creates.Load(), "only the first task's golden was built")
	require.NoError(t, p.Close(context.Background()))
}

// Every task's golden is built ahead, in plan order, before any job asks
// for it; a job of a later task then forks at once. A stopped schedule
// builds nothing more.
func TestGoldensAreBuiltAhead(t *testing.T) {
	f := newFake(true)
	var mu sync.Mutex
	var built []string
	p, err := New(Config{Provider: f, Replicas: 2, OnGolden: func(g GoldenProgress) {
		if g.Phase == GoldenBuilt {
			mu.Lock()
			built = append(built, g.Template)
			mu.Unlock()
		}
	}})
	require.NoError(t, err)
	var tmpls []*Template
	for _, k := range []string{"a", "b", "c"} {
		tmpls = append(tmpls, &Template{Key: k, Setup: []string{"touch " + k}})
	}
	ctx := context.Background()
	p.Prepare(ctx, ctx, tmpls, 2)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(built) == 3
	}, 10*time.Second, time.Millisecond, "every golden is built with no job asking")
	require.EqualValues(t, 3, f.creates.Load())
	var jobs []Job
	for _, tm := range tmpls {
		jobs = append(jobs, Job{Template: tm})
	}
	p.Run(ctx, feed(jobs...), func(ctx context.Context, job Job, r Replica, err error) Outcome {
		assert.NoError(t, err)
		assert.NotNil(t, r.Golden)
		return Done
	})
	require.EqualValues(t, 3, f.creates.Load(), "no golden was built twice")
	require.Equal(t, 3, p.Stats().GoldenBuilds)
	require.NoError(t, p.Close(ctx))

	stopped, stop := context.WithCancel(ctx)
	stop()
	f2 := newFake(true)
	p2, err := New(Config{Provider: f2, Replicas: 2})
	require.NoError(t, err)
	p2.Prepare(ctx, stopped, tmpls, 2)
	require.NoError(t, p2.Close(ctx))
	require.Zero(t, f2.creates.Load(), "a stopped run builds nothing ahead")
}

// An episode's sandbox is torn down off the slot's path: the next job on
// the one replica runs while the last one's Close still runs, and Run
// returns only once every sandbox is closed.
func TestTeardownIsOffTheEpisodesPath(t *testing.T) {
	f := newFake(true)
	unblock := make(chan struct{})
	var closes atomic.Int32
	f.closeHook = func() {
		if closes.Add(1) == 2 { // the first episode's fork (1 is the golden builder)
			<-unblock
		}
	}
	p, err := New(Config{Provider: f, Replicas: 1})
	require.NoError(t, err)
	tm := &Template{Key: "a"}
	var ran atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(context.Background(), feed(Job{Template: tm}, Job{Template: tm}), func(ctx context.Context, job Job, r Replica, err error) Outcome {
			assert.NoError(t, err)
			if ran.Add(1) == 2 {
				close(unblock) // ran while the first sandbox's Close waited
			}
			return Done
		})
	}()
	select {
	case <-done:
		t.Fatal("Run returned with a sandbox still closing")
	case <-unblock:
	case <-time.After(20 * time.Second):
		t.Fatal("the second episode waited for the first one's teardown")
	}
	<-done
	require.Zero(t, f.openCount(), "every sandbox is closed when Run returns")
	require.NoError(t, p.Close(context.Background()))
}
