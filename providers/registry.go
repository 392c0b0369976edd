package providers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Options configure a provider when it is opened. Params carries
// backend-specific settings (documented by each backend); a backend rejects a
// param it does not know, listing the ones it does.
type Options struct {
	// RunID labels everything the provider makes, so a sweep can find it.
	RunID string
	// Dir is where the provider may keep state on the host (workspaces,
	// checkpoints). Empty means a fresh directory under os.TempDir.
	Dir string
	// Params are backend-specific settings.
	Params map[string]string
}

// Factory opens a provider. ctx bounds the start-up only (connecting to an
// engine, probing mounts): a factory must return once ctx is done, and the
// provider it returns must not keep ctx for later work.
type Factory func(ctx context.Context, opts Options) (Provider, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Factory{}
	declared   = map[string]Capabilities{}
)

// Register makes a provider available by name. It panics if name is empty,
// f is nil, or name is already registered, as database/sql.Register does:
// these are programming errors caught at init.
func Register(name string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if name == "" {
		panic("providers: Register with an empty name")
	}
	if f == nil {
		panic("providers: Register of " + name + " with a nil factory")
	}
	if _, dup := registry[name]; dup {
		panic("providers: Register called twice for " + name)
	}
	registry[name] = f
}

// Declare records what a registered provider's Capabilities are whatever
// its options, so that a caller can know them before opening it (collect
// tells its policy how the exec tool behaves before the provider starts).
func Declare(name string, caps Capabilities) {
	registryMu.Lock()
	defer registryMu.Unlock()
	declared[name] = caps
}

// Declared returns what Declare recorded for name; ok is false when the
// provider declared nothing (its capabilities depend on how it is opened,
// or it is not registered).
func Declared(name string) (caps Capabilities, ok bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	caps, ok = declared[name]
	return caps, ok
}

// Names returns the registered provider names, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Open opens the named provider. An unknown name fails with the list of
// known ones. Cancelling ctx abandons the start-up; Open then fails with an
// error wrapping ctx's.
//
// Open does not sweep what crashed runs left: callers that want that find
// the provider's Sweeper with As and call it, so a read-only caller (a test,
// a tool listing capabilities) never removes anything.
func Open(ctx context.Context, name string, opts Options) (Provider, error) {
	registryMu.RLock()
	f, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("providers: unknown provider %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("providers: opening %s: %w", name, err)
	}
	return f(ctx, opts)
}

// CheckParams returns an error naming the first key of params not in known.
// Backends call it so that a misspelt setting is never silently ignored.
func CheckParams(provider string, params map[string]string, known ...string) error {
	ok := map[string]bool{}
	for _, k := range known {
		ok[k] = true
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !ok[k] {
			sort.Strings(known)
			return fmt.Errorf("providers: %s has no setting %q (known: %s)", provider, k, strings.Join(known, ", "))
		}
	}
	return nil
}
