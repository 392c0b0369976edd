package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/forkline/forkline/providers"
)

// Branched is the Strategy of a replica forked from a Branch: a checkpoint
// of another replica in the middle of its episode rather than a golden.
// It is never a reset strategy a run is configured with.
const Branched Strategy = "branch"

// DefaultMaxBranches is Config.MaxBranches when it is zero: twice the
// replicas, room for each replica's episode to have a branch point whose
// branches are running while the next one is made.
func defaultMaxBranches(replicas int) int { return 2 * replicas }

// ErrTooManyBranches is returned by Checkpoint when Config.MaxBranches
// branch points are live: release one (or let the jobs that fork it end)
// first. It is a caller's bookkeeping error, not the sandbox's.
var ErrTooManyBranches = errors.New("pool: too many branch points live")

// ErrCannotBranch is returned by Checkpoint when the pool recreates its
// replicas instead of forking them: its provider cannot checkpoint, and
// nothing fakes a fork.
var ErrCannotBranch = errors.New("pool: this provider cannot checkpoint, so episodes cannot branch")

// Branch is a branch point: a checkpoint of a live replica taken in the
// middle of its episode. Forks of it (ForkBranch, or jobs whose
// Job.Branch it is) start with the replica's files as they were then —
// not its processes: the template's BranchStart commands run in each
// instead of its Start commands. On a provider that forks memory
// (Capabilities().ForksMemory) they start with its processes too, and
// nothing runs in them.
//
// A Branch holds provider storage (local: the layer of the episode's
// changes; docker: the committed image) until it is released: by Release,
// once the uses it was made with have ended, or at the pool's Close.
// Config.MaxBranches bounds how many are live at once. It is safe for
// concurrent use.
type Branch struct {
	// Checkpoint is the provider's checkpoint of the replica.
	Checkpoint providers.Checkpoint
	// Template is the replica's template; its BranchStart commands run in
	// every fork.
	Template *Template
	// Golden is the golden the replica was forked from, nil when it was
	// recreated or is itself a branch of a recreated one.
	Golden *Golden
	// Took is how long the checkpoint took.
	Took time.Duration

	p        *Pool
	mu       sync.Mutex
	uses     int // jobs still to end before it is released; 0 = only Release
	released bool
}

// Checkpoint makes a branch point of r, the replica of an episode in
// progress: the provider checkpoints its sandbox (which stays usable, and
// whose later changes do not reach the branch point). uses, when above
// zero, is how many jobs will fork it (Job.Branch): the branch point is
// released once that many have ended, each after its sandbox is closed.
// With uses 0 the caller releases it (Release). It fails with
// ErrCannotBranch on a pool that recreates, and with ErrTooManyBranches
// when Config.MaxBranches are live.
func (p *Pool) Checkpoint(ctx context.Context, r Replica, label string, uses int) (*Branch, error) {
	if p.strategy != Fork {
		return nil, fmt.Errorf("%w (provider %s, reset %s)", ErrCannotBranch, p.cfg.Provider.Name(), p.strategy)
	}
	if r.Sandbox == nil {
		return nil, errors.New("pool: checkpoint of a replica without a sandbox")
	}
	if uses < 0 {
		return nil, fmt.Errorf("pool: checkpoint with %d uses", uses)
	}
	p.mu.Lock()
	if len(p.branches) >= p.cfg.MaxBranches {
		n := len(p.branches)
		p.mu.Unlock()
		return nil, fmt.Errorf("%w: %d of %d (Config.MaxBranches)", ErrTooManyBranches, n, p.cfg.MaxBranches)
	}
	// The slot is taken before the checkpoint is made, so concurrent
	// callers cannot pass the bound between the check and the insert.
	b := &Branch{Template: r.template, Golden: r.Golden, p: p, uses: uses}
	p.branches[b] = struct{}{}
	p.mu.Unlock()
	began := time.Now()
	cp, err := p.cfg.Provider.Checkpoint(ctx, r.Sandbox, label)
	if err != nil {
		p.mu.Lock()
		delete(p.branches, b)
		p.mu.Unlock()
		return nil, fmt.Errorf("pool: branch checkpoint of %s: %w", r.Sandbox.Info().ID, err)
	}
	b.Checkpoint, b.Took = cp, time.Since(began)
	if b.Template == nil {
		b.Template = &Template{}
	}
	return b, nil
}

// ForkBranch returns a replica forked from b, with the template's
// BranchStart commands run (none on a provider that forks memory): ready
// for a branch's episode. The caller
// closes its sandbox. Replica.Strategy is Branched; Reset is the fork and
// the commands.
func (p *Pool) ForkBranch(ctx context.Context, b *Branch) (Replica, error) {
	began := time.Now()
	r := Replica{Strategy: Branched, Golden: b.Golden, template: b.Template}
	if b.isReleased() {
		return r, fmt.Errorf("pool: fork of branch point %s, which was released", b.Checkpoint.ID)
	}
	release, err := p.createSlot(ctx)
	if err != nil {
		return r, err
	}
	sb, err := p.cfg.Provider.Fork(ctx, b.Checkpoint)
	release()
	if err != nil {
		return r, fmt.Errorf("pool: fork of branch point %s: %w", b.Checkpoint.ID, err)
	}
	if !p.forksMemory { // else the branch runs its parent's processes
		if err := runCommands(ctx, sb, "branch_start", b.Template.BranchStart, b.Template.CommandTimeout); err != nil {
			sb.Close(context.WithoutCancel(ctx))
			return r, err
		}
	}
	r.Sandbox, r.Origin, r.Reset = sb, sb.Info().Origin, time.Since(began)
	p.count(func(s *Stats) { s.Resets++; s.BranchForks++ })
	return r, nil
}

// Release releases b's checkpoint; forks of b still running keep working.
// It is idempotent.
func (b *Branch) Release(ctx context.Context) error {
	b.mu.Lock()
	if b.released {
		b.mu.Unlock()
		return nil
	}
	b.released = true
	b.mu.Unlock()
	p := b.p
	p.mu.Lock()
	delete(p.branches, b)
	p.mu.Unlock()
	if b.Checkpoint.ID == "" {
		return nil
	}
	if err := p.cfg.Provider.Release(ctx, b.Checkpoint); err != nil {
		return fmt.Errorf("pool: release of branch point %s: %w", b.Checkpoint.ID, err)
	}
	return nil
}

// ended counts the end of one job that forked b, releasing b after the
// last of its uses.
func (b *Branch) ended(ctx context.Context) {
	b.mu.Lock()
	last := false
	if b.uses > 0 {
		b.uses--
		last = b.uses == 0
	}
	b.mu.Unlock()
	if last {
		if err := b.Release(context.WithoutCancel(ctx)); err != nil {
			b.p.cfg.Log("%v", err)
		}
	}
}

func (b *Branch) isReleased() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.released
}

// LiveBranches is how many branch points are live (made, not released).
func (p *Pool) LiveBranches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.branches)
}

// releaseBranches releases every branch point still live; Close calls it
// before it releases the goldens they were made over.
func (p *Pool) releaseBranches(ctx context.Context) error {
	p.mu.Lock()
	live := make([]*Branch, 0, len(p.branches))
	for b := range p.branches {
		live = append(live, b)
	}
	p.mu.Unlock()
	var errs []error
	for _, b := range live {
		errs = append(errs, b.Release(ctx))
	}
	return errors.Join(errs...)
}
