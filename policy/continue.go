package policy

import (
	"context"

	"github.com/forkline/forkline/runtime"
)

// Continuer is implemented by policies that keep state of their own
// between decisions — the openai policy's conversation, a
// token-in-token-out policy's running token ids — so that they can take up
// an episode they did not start: a branch continuing its parent's history.
//
// Continue is called once, on a fresh policy (made by Source.NewPolicy for
// the branch's own Episode, so per-episode settings such as a sampling seed
// are the branch's), before its first Decide, with h, the history the
// branch continues from: its parent's instruction and steps, each with the
// model turn that decided it (runtime.ModelEvent: the text, the server's
// token ids). parent, when not nil, is the live policy that decided h — a
// branch point in this process: a policy of the same kind takes its state
// from it exactly, so that the branch's next request is the one the parent
// would have sent, and its token record extends the parent's ids. parent
// is nil when h comes from a record (a branch re-made from a dataset, a
// resumed run): the policy rebuilds its state from h's steps and model
// turns, as faithfully as they record it, and says in its documentation
// what it cannot rebuild. Continue must not change parent, nor keep it.
// An error means the policy cannot take up h; the branch then ends as
// policy_error.
//
// A policy without Continue decides from the History alone, as the script
// policy does (its action for step i is its i-th): it needs nothing.
type Continuer interface {
	Continue(ctx context.Context, h runtime.History, parent runtime.Policy) error
}

// Continue tells pol, a fresh policy, that it continues h (see Continuer);
// parent is the live policy that decided h, or nil. A policy that does not
// implement Continuer needs nothing and gets nothing.
func Continue(ctx context.Context, pol runtime.Policy, h runtime.History, parent runtime.Policy) error {
	if c, ok := pol.(Continuer); ok {
		return c.Continue(ctx, h, parent)
	}
	return nil
}
