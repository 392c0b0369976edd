package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// fakeProvider keeps sandboxes in memory: a sandbox is a map of files, a
// command "touch F" writes F, "fail" exits 1, "break" breaks the sandbox.
type fakeProvider struct {
	canCheckpoint bool
	creates       atomic.Int32
	forks         atomic.Int32
	failForks     atomic.Int32 // fail this many forks first
	mu            sync.Mutex
	open          map[*fakeSandbox]bool
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
	return providers.Capabilities{Checkpoint: f.canCheckpoint, Fork: f.canCheckpoint}
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
	f.forks.Add(1)
	s := &fakeSandbox{p: f, files: map[string]bool{}, origin: "fork"}
	for _, k := range strings.Split(cp.ID, ",") {
		if k != "" {
			s.files[k] = true
		}
	}
	return f.track(s), nil
}
func (f *fakeProvider) Release(ctx context.Context, cp providers.Checkpoint) error { return nil }
func (f *fakeProvider) Close(ctx context.Context) error                            { return nil }
func (f *fakeProvider) openCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.open)
}

func (s *fakeSandbox) Act(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	switch {
	case a.Cmd == "fail":
		return runtime.Observation{Output: []byte("boom"), ExitCode: 1, Error: true}, nil
	case strings.HasPrefix(a.Cmd, "touch "):
		s.files[strings.TrimPrefix(a.Cmd, "touch ")] = true
	}
	return runtime.Observation{}, nil
}
func (s *fakeSandbox) Close(context.Context) error {
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
	var seen atomic.Int32
	p.Run(context.Background(), feed(jobs...), func(ctx context.Context, j Job, r Replica, err error) Outcome {
		require.NoError(t, err)
		fs := r.Sandbox.(*fakeSandbox).files
		require.True(t, fs["built"] && fs["started"], "setup reached the golden and start ran in the fork")
		require.Equal(t, Fork, r.Strategy)
		require.NotNil(t, r.Golden)
		seen.Add(1)
		return Done
	})
	require.EqualValues(t, 10, seen.Load())
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
	require.Eventually(t, func() bool { return len(p.standbys["t"].ready) == 2 }, 5*time.Second, time.Millisecond)
	var standby atomic.Int32
	var jobs []Job
	for range 5 {
		jobs = append(jobs, Job{Template: tmpl})
	}
	p.Run(ctx, feed(jobs...), func(ctx context.Context, j Job, r Replica, err error) Outcome {
		require.NoError(t, err)
		require.True(t, r.Sandbox.(*fakeSandbox).files["started"])
		if r.Standby {
			standby.Add(1)
			require.Positive(t, r.Prepared)
		}
		return Done
	})
	require.Positive(t, standby.Load(), "some resets were hand-offs")
	require.NoError(t, p.Close(context.Background()))
	require.EqualValues(t, 5, f.forks.Load(), "no replica was forked beyond the expected jobs")
	require.Equal(t, 0, f.openCount(), "standby leftovers are closed")
}
