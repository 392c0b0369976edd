package providers

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// sweepingProvider has an optional ability.
type sweepingProvider struct {
	fakeProvider
	swept int
}

func (s *sweepingProvider) Sweep(context.Context) error { s.swept++; return nil }

// decorator embeds Provider, as decorators do: the embedded interface hides
// Sweep, and only Unwrap leads back to it.
type decorator struct {
	Provider
}

func (d *decorator) Unwrap() Provider { return d.Provider }

// opaque decorates without Unwrap.
type opaque struct{ Provider }

// intercepting decorates and has the ability itself.
type intercepting struct {
	decorator
	swept int
}

func (i *intercepting) Sweep(context.Context) error { i.swept++; return nil }

func TestAsFindsAnAbilityThroughDecorators(t *testing.T) {
	inner := &sweepingProvider{fakeProvider: fakeProvider{name: "inner"}}
	twice := &decorator{&decorator{inner}}

	_, direct := Provider(twice).(Sweeper)
	require.False(t, direct, "the type assertion alone misses the ability: the reason As exists")
	sw, ok := As[Sweeper](twice)
	require.True(t, ok)
	require.NoError(t, sw.Sweep(context.Background()))
	require.Equal(t, 1, inner.swept, "As returned the inner provider's Sweeper")

	require.Same(t, inner, Unwrap(Unwrap(twice)))
	require.Nil(t, Unwrap(inner), "a provider that decorates nothing unwraps to nil")

	_, ok = As[Sweeper](&opaque{inner})
	require.False(t, ok, "a decorator without Unwrap hides the ability")
	_, ok = As[Sweeper](&fakeProvider{name: "plain"})
	require.False(t, ok)
	_, ok = As[Sweeper](nil)
	require.False(t, ok)

	// A decorator that has the ability itself is found first.
	in := &intercepting{decorator: decorator{inner}}
	sw, ok = As[Sweeper](in)
	require.True(t, ok)
	require.NoError(t, sw.Sweep(context.Background()))
	require.Equal(t, 1, in.swept)
	require.Equal(t, 1, inner.swept, "the intercepted call did not reach the inner provider")
}

func TestAsReturnsTheProviderItself(t *testing.T) {
	inner := &sweepingProvider{fakeProvider: fakeProvider{name: "inner"}}
	got, ok := As[*sweepingProvider](&decorator{inner})
	require.True(t, ok)
	require.Same(t, inner, got, "As can also find a concrete backend under decorators")
}
