package providers

// Unwrapper is implemented by decorators: a Provider that adds something to
// another one (the browser decorator, a test's fault injector) returns the
// provider underneath from Unwrap. A decorator usually embeds the Provider
// interface, which hides every method of the inner provider beyond the
// interface; Unwrap keeps those optional abilities (Sweeper, a LeakChecker)
// reachable through As.
type Unwrapper interface {
	// Unwrap returns the provider underneath, or nil when there is none.
	Unwrap() Provider
}

// Unwrap returns the provider p decorates, or nil when p is not an
// Unwrapper (as errors.Unwrap does for errors).
func Unwrap(p Provider) Provider {
	if u, ok := p.(Unwrapper); ok {
		return u.Unwrap()
	}
	return nil
}

// As finds the first provider in p's chain — p, then what Unwrap returns,
// and so on — that implements T, and returns it as T. It is how callers find
// an optional interface of a provider that may be decorated:
//
//	if sw, ok := providers.As[providers.Sweeper](prov); ok {
//		err = sw.Sweep(ctx)
//	}
//
// A decorator that implements T itself is found first, so it can intercept
// the ability; one that does not passes it through by Unwrap. The chain is
// walked as restic's backend.AsBackend walks wrapped backends.
func As[T any](p Provider) (T, bool) {
	for p != nil {
		if t, ok := p.(T); ok {
			return t, true
		}
		p = Unwrap(p)
	}
	var zero T
	return zero, false
}

// SandboxUnwrapper is implemented by sandbox decorators (the browser's
// session): Sandbox returns the sandbox underneath, whose optional
// abilities (Uploader) AsSandbox then finds.
type SandboxUnwrapper interface {
	Sandbox() Sandbox
}

// AsSandbox finds the first sandbox in sb's chain — sb, then what Sandbox
// returns, and so on — that implements T, as As does for providers.
func AsSandbox[T any](sb Sandbox) (T, bool) {
	for sb != nil {
		if t, ok := sb.(T); ok {
			return t, true
		}
		u, ok := sb.(SandboxUnwrapper)
		if !ok {
			break
		}
		sb = u.Sandbox()
	}
	var zero T
	return zero, false
}
