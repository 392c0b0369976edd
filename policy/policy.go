// Package policy owns the policy registry and what a policy is handed and
// hands back: the Options it is opened with, the Episode it decides (its
// id, repeat and seed, the task's instruction, scripted solution and
// allowed actions), and the Conversation it had with a model, which a
// dataset's manifest records in its policy entry (manifest.Policy) and exporters read to rebuild the
// messages the model was shown.
//
// Policies register themselves by name in init, as database/sql drivers do
// (policy/script as "script", policy/openai as "openai"); Open returns a
// Source that makes one fresh runtime.Policy per episode.
//
// It knows runtime's actions and decisions and aci's tool schemas. It must
// not know tasks, the collector, providers or datasets: the collector turns
// a task into an Episode, and a policy needs nothing else of it.
package policy

import (
	"context"
	"fmt"
	"github.com/forkline/forkline/aci"
	"sort"
	"strings"
	"sync"

	"github.com/forkline/forkline/runtime"
)

// Options configure a policy when it is opened. They are the same for every
// episode of a run.
type Options struct {
	// Params are the policy's settings (collect's -policy-opt key=value).
	// A policy refuses a key it does not know, listing the ones it does.
	// They are recorded in the manifest, so they never hold a secret:
	// policies read keys from environment variables Params name.
	Params map[string]string
	// ScriptFile is a file of canonical actions to replay instead of each
	// episode's Solution (collect's -script), for policies that replay
	// actions; "" replays the solution. Policies that ask a model ignore it.
	// The manifest records its path and its content's sha256 (manifest.NewPolicy).
	ScriptFile string
	// Log, when set, receives warnings (a retried request), one line each,
	// without a trailing newline. It never sees a secret.
	Log func(format string, args ...any)
	// Info, when set, receives notes that warn of nothing (which token
	// path the policy chose), one line each; without it they go to Log.
	Info func(format string, args ...any)
}

// Episode is what a policy is told of the episode it decides: enough to
// decide it, nothing of the task spec's other parts (files, setup, verify).
type Episode struct {
	// ID is the episode's id; "" when Source.NewPolicy is called to check a
	// task before the run starts.
	ID     string
	Repeat int   // the repeat index of the task
	Seed   int64 // the run's seed
	// Instruction is the task's instruction: the user message.
	Instruction string
	// Solution is the task's scripted solution, nil when it has none.
	Solution []runtime.Action
	// Actions are the actions the task allows (a shell task its shell
	// actions, a browser task its GUI actions and the shell ones it lists);
	// nil allows every canonical action. A policy never offers or takes an
	// action outside them.
	Actions []runtime.ActionKind
	// Shell is the task's shell mode ("" or "persistent"; task.Spec.Shell),
	// or aci.ShellPersistentForked for a persistent shell on a provider
	// whose forks go on with it (aci.ExecShell): the exec tool says which
	// (aci.ToolsFor).
	Shell string
}

// Source makes the policies of one run, from the Options it was opened
// with. It is safe for concurrent use: the collector calls NewPolicy from
// every replica's goroutine.
type Source interface {
	// NewPolicy returns a fresh policy for ep: a runtime.Policy holds one
	// episode's conversation, so it is never shared between episodes. It is
	// also called once per task with an Episode without ID before the run
	// starts, so that a task the policy cannot run (a script policy on a
	// task without a solution) is refused before anything is collected.
	NewPolicy(ep Episode) (runtime.Policy, error)
}

// Conversational is implemented by Sources whose policies talk to a model.
// Conversation says how, with defaults applied, for the manifest (see
// manifest.Policy). A Source without it (the script policy) had no conversation.
type Conversational interface {
	Conversation() (Conversation, error)
}

// Checker is implemented by Sources whose policies depend on a service (a
// model server): Check asks it, cheaply, whether it answers and serves what
// the options name, so a collector can refuse a run before anything is
// spent rather than lose its first episodes. An error names the address and
// what it answered, never a secret.
type Checker interface {
	Check(ctx context.Context) error
}

// Factory opens a policy: it checks opts once, up front, and returns the
// Source of the run's policies. It must not contact anything (a model
// server is first asked when an episode's policy decides), so opening is
// cheap and needs no context.
type Factory func(opts Options) (Source, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Factory{}
)

// Register makes a policy available by name. It panics if name is empty, f
// is nil, or name is already registered, as database/sql.Register does:
// these are programming errors caught at init.
func Register(name string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if name == "" {
		panic("policy: Register with an empty name")
	}
	if f == nil {
		panic("policy: Register of " + name + " with a nil factory")
	}
	if _, dup := registry[name]; dup {
		panic("policy: Register called twice for " + name)
	}
	registry[name] = f
}

// Names returns the registered policy names, sorted.
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

// Open opens the named policy with opts. An unknown name fails with the
// list of known ones; bad options fail with the policy's own error.
func Open(name string, opts Options) (Source, error) {
	registryMu.RLock()
	f, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("policy: unknown policy %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return f(opts)
}

// ExecShell is Episode.Shell for a task whose shell mode is shell on a
// provider whose checkpoints hold processes (forksMemory) or not: see
// aci.ExecShell.
func ExecShell(shell string, forksMemory bool) string { return aci.ExecShell(shell, forksMemory) }
