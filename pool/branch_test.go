package pool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/runtime"
)

func touch(t *testing.T, r Replica, name string) {
	t.Helper()
	_, err := r.Sandbox.Act(t.Context(), runtime.Action{Kind: runtime.ActExec, Cmd: "touch " + name})
	require.NoError(t, err)
}

// A branch point of a replica mid-episode: jobs that fork it see the
// replica's files then, run the branch start commands instead of the start
// commands, and the branch point is released once its uses have ended, each
// after its sandbox closed.
func TestBranchForksAndReleasesAfterItsUses(t *testing.T) {
	f := newFake(true)
	p, err := New(Config{Provider: f, Replicas: 2})
	require.NoError(t, err)
	tmpl := &Template{Key: "t", Setup: []string{"touch built"}, Start: []string{"touch started"}, BranchStart: []string{"touch branched"}}
	r, err := p.acquire(t.Context(), tmpl)
	require.NoError(t, err)
	touch(t, r, "step1")
	b, err := p.Checkpoint(t.Context(), r, "bp", 3)
	require.NoError(t, err)
	require.Same(t, tmpl, b.Template)
	require.Equal(t, r.Golden, b.Golden)
	touch(t, r, "after")
	require.NoError(t, r.Sandbox.Close(t.Context()))
	require.Equal(t, 1, p.LiveBranches())

	got := collectReplicas(t, p, t.Context(), []Job{{Template: tmpl, Branch: b}, {Template: tmpl, Branch: b}, {Template: tmpl, Branch: b}})
	require.Len(t, got, 3)
	for _, g := range got {
		require.NoError(t, g.err)
		require.Equal(t, Branched, g.r.Strategy)
		require.Equal(t, map[string]bool{"built": true, "started": true, "step1": true, "branched": true}, g.files,
			"the replica's files at the checkpoint, then the branch start commands; not the start commands again, nothing after")
	}
	require.Zero(t, p.LiveBranches(), "released after its three uses")
	require.Contains(t, f.released, b.Checkpoint.ID)
	require.Zero(t, f.openCount(), "every branch's sandbox was closed before the release")
	require.Equal(t, 3, p.Stats().BranchForks)
	require.NoError(t, p.Close(context.Background()))
}

// The number of live branch points is bounded; Close releases those still
// live before the goldens they were made over; a pool that recreates
// refuses to branch, by name.
func TestBranchBoundCloseAndRecreate(t *testing.T) {
	f := newFake(true)
	p, err := New(Config{Provider: f, MaxBranches: 1})
	require.NoError(t, err)
	tmpl := &Template{Key: "t", Setup: []string{"touch built"}}
	r, err := p.acquire(t.Context(), tmpl)
	require.NoError(t, err)
	defer r.Sandbox.Close(context.Background())
	touch(t, r, "x")
	b, err := p.Checkpoint(t.Context(), r, "one", 0)
	require.NoError(t, err)
	_, err = p.Checkpoint(t.Context(), r, "two", 0)
	require.ErrorIs(t, err, ErrTooManyBranches)
	require.NoError(t, b.Release(t.Context()))
	require.NoError(t, b.Release(t.Context()), "Release is idempotent")
	_, err = p.ForkBranch(t.Context(), b)
	require.ErrorContains(t, err, "was released")
	touch(t, r, "y")
	live, err := p.Checkpoint(t.Context(), r, "three", 0)
	require.NoError(t, err, "a released branch point frees its slot")
	require.NoError(t, p.Close(context.Background()))
	require.Zero(t, p.LiveBranches())
	require.Equal(t, []string{b.Checkpoint.ID, live.Checkpoint.ID, "built"}, f.released,
		"the live branch point is released at Close, before the golden")

	rec, err := New(Config{Provider: newFake(false)})
	require.NoError(t, err)
	_, err = rec.Checkpoint(t.Context(), Replica{Sandbox: r.Sandbox}, "x", 1)
	require.ErrorIs(t, err, ErrCannotBranch)
}
