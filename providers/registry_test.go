package providers

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeProvider is the least a Provider can be; the tests below only name it.
type fakeProvider struct {
	Provider // nil: calling anything but Name panics
	name     string
}

func (f *fakeProvider) Name() string { return f.name }

func TestRegisterRefusesProgrammingErrors(t *testing.T) {
	ok := func(context.Context, Options) (Provider, error) { return &fakeProvider{name: "x"}, nil }
	require.PanicsWithValue(t, "providers: Register with an empty name", func() { Register("", ok) })
	require.PanicsWithValue(t, "providers: Register of test-nil with a nil factory", func() { Register("test-nil", nil) })
	Register("test-dup", ok)
	require.PanicsWithValue(t, "providers: Register called twice for test-dup", func() { Register("test-dup", ok) })
}

func TestNamesSortedAndOpenUnknownListsThem(t *testing.T) {
	open := func(context.Context, Options) (Provider, error) { return &fakeProvider{name: "y"}, nil }
	Register("test-zeta", open)
	Register("test-alpha", open)
	names := Names()
	require.True(t, slices.IsSorted(names), "Names must be sorted: %v", names)
	require.Contains(t, names, "test-alpha")
	require.Contains(t, names, "test-zeta")

	_, err := Open(context.Background(), "test-nope", Options{})
	require.ErrorContains(t, err, `unknown provider "test-nope" (known: `)
	require.ErrorContains(t, err, "test-alpha, ")
}

// Open hands the factory its context, and a context already done never
// reaches the factory: start-up (a Docker sweep, an engine ping) is
// cancellable.
func TestOpenPassesAndHonoursTheContext(t *testing.T) {
	type key struct{}
	var got context.Context
	calls := 0
	Register("test-ctx", func(ctx context.Context, opts Options) (Provider, error) {
		calls++
		got = ctx
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return &fakeProvider{name: "test-ctx"}, nil
	})
	ctx := context.WithValue(context.Background(), key{}, "mine")
	p, err := Open(ctx, "test-ctx", Options{})
	require.NoError(t, err)
	require.Equal(t, "test-ctx", p.Name())
	require.Equal(t, "mine", got.Value(key{}), "the factory gets the caller's context")

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Open(cancelled, "test-ctx", Options{})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "providers: opening test-ctx")
	require.Equal(t, 1, calls, "a cancelled Open does not start the provider")
	require.False(t, errors.Is(err, ErrClosed))
}
