package collect

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// A resume is decided read-only. Everything below reads the run being
// resumed through shard.Open, which takes no lock and writes nothing, so a
// refused resume (a mismatched plan, provider, policy or capture policy, a
// task missing or edited) leaves every byte of the dataset as it was. Only
// once the resume is accepted does Run take the writer lock (shard.Resume,
// which deletes leftover files and rewrites the manifest).

// priorRun is what the read-only look at the run being resumed found.
type priorRun struct {
	manifest shard.Manifest
	// kept are the episodes the dataset holds that the resume keeps;
	// cancelled are the ones kept as cancelled, which it runs again.
	kept      map[string]bool
	cancelled map[string]bool
	// branched are the kept roots that branched (their branch points are
	// gone with the process that made them).
	branched map[string]bool
	// tree is every kept episode's parent and branch index.
	tree map[string]treeNode
	// tally is the summary of the kept episodes (their rows and rewards),
	// so the resumed run's summary covers the whole dataset.
	tally *Summary
}

// inspectResume reads the run in cfg.Out without changing it, refuses it
// when it cannot be resumed with cfg and its policy record pol, and tallies
// the episodes it keeps.
func inspectResume(ctx context.Context, cfg Config, specs []task.Spec, pol manifest.Policy) (*priorRun, error) {
	if err := shard.CheckFree(cfg.Out); err != nil {
		return nil, fielderr.New("collect", "Resume", "", fielderr.New("", "Out", cfg.Out, err))
	}
	ds, err := shard.Open(cfg.Out)
	if errors.Is(err, shard.ErrNoDataset) {
		return nil, fielderr.Errorf("collect", "Resume", "", "%s holds no run (no manifest.json)", cfg.Out)
	}
	if err != nil {
		return nil, fielderr.New("collect", "Resume", "", err)
	}
	m := ds.Manifest()
	if err := compatible(m, specs, cfg, pol); err != nil {
		return nil, err
	}
	// A complete run reads only its episodes and rewards to find there is
	// nothing to do: every shard is checked first, so that a damaged steps
	// shard is refused as it is in a partial run, whose shards the writer
	// checks when it resumes (shard.Resume).
	if m.Status == shard.StatusComplete {
		if err := ds.Check(); err != nil {
			return nil, fielderr.New("collect", "Resume", "", err)
		}
	}
	p := &priorRun{manifest: m, kept: map[string]bool{}, cancelled: map[string]bool{}, branched: map[string]bool{}, tree: map[string]treeNode{}, tally: newSummary(0, 0)}
	// The verifier rewards first, so that each kept episode is told to the
	// tally once, with its reward, as its end event told it when it ran.
	rewards := map[string]schemas.RewardRow{}
	for r, err := range ds.Rewards() {
		if err != nil {
			return nil, fielderr.Errorf("collect", "Resume", "", "reading the kept rewards: %w", err)
		}
		if v := episode.VerifierReward([]schemas.RewardRow{r}); v != nil {
			rewards[r.EpisodeID] = *v
		}
	}
	for e, err := range ds.Episodes() {
		if err != nil {
			return nil, fielderr.Errorf("collect", "Resume", "", "reading the kept episodes: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, fielderr.New("collect", "Resume", "", err)
		}
		if e.ExitReason == string(runtime.ExitCancelled) {
			p.cancelled[e.EpisodeID] = true
			continue
		}
		p.kept[e.EpisodeID] = true
		if e.ParentEpisodeID != nil && e.BranchIndex != nil {
			p.tree[e.EpisodeID] = treeNode{parent: *e.ParentEpisodeID, index: int(*e.BranchIndex)}
		} else {
			p.tree[e.EpisodeID] = treeNode{}
		}
		if e.ExitReason == string(runtime.ExitBranched) {
			p.branched[e.EpisodeID] = true
		}
		var reward *schemas.RewardRow
		if r, ok := rewards[e.EpisodeID]; ok {
			reward = &r
		}
		p.tally.tally.Kept(e, reward)
	}
	return p, nil
}

// nothingToDo reports whether the run is complete as it stands: every
// planned episode kept, none to run again, and the manifest says complete.
// Resuming it changes nothing.
func (p *priorRun) nothingToDo(plan []planned, branch BranchPlan) bool {
	if p.manifest.Status != shard.StatusComplete || len(p.cancelled) > 0 {
		return false
	}
	for i := range plan {
		if !p.kept[plan[i].id] {
			return false
		}
	}
	for id := range p.branched {
		_, depth, _, ok := p.place(id, branch)
		if ok && len(missingBranches(id, (depth+1)*branch.At, branch, p.kept)) > 0 {
			return false
		}
	}
	return true
}

// The provider settings' table (which settings shape a sandbox) is
// manifest's: serve's resume applies the same rule.
var (
	providerParamShapes   = manifest.ProviderParamShapes
	retiredProviderParams = manifest.RetiredProviderParams
	providerSettingShapes = manifest.ProviderSettingShapes
)

// policyOptionShapes is manifest's table: serve's resume applies it too.
var policyOptionShapes = manifest.PolicyOptionShapes

// compatible refuses a resume that would produce other episodes than the
// run being resumed: other tasks or capture policy, another provider or a
// setting of it that changes what a sandbox is, another policy or option
// that changes what it does (manifest.ResumeMismatches, the rule serve's
// resume applies too; now is this command's policy record), or another
// plan. Every difference is listed, each with the run's value and this
// command's, in a typed error (manifest.ErrResumeMismatch) whose fields the
// command names by its flags.
func compatible(m shard.Manifest, specs []task.Spec, cfg Config, now manifest.Policy) error {
	diffs, err := manifest.ResumeMismatches(m, manifest.Resuming{Tasks: specs, Capture: cfg.Capture,
		Provider: manifest.Provider{Name: cfg.Provider, Params: cfg.ProviderParams}, Policy: now})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrIncompatibleResume, err)
	}
	if plan, err := manifest.DecodePlan(m.Plan); err == nil {
		differ := func(field string, was, given any) {
			diffs = append(diffs, manifest.Mismatch{Field: "plan." + field, Stored: fmt.Sprint(was), Given: fmt.Sprint(given)})
		}
		if plan.Repeats != cfg.Repeats {
			differ("repeats", plan.Repeats, cfg.Repeats)
		}
		if plan.Seed != cfg.Seed {
			differ("seed", plan.Seed, cfg.Seed)
		}
		if plan.Part != manifest.Part(cfg.Part) {
			differ("part", plan.Part, manifest.Part(cfg.Part))
		}
		if now := cfg.Branch.String(); plan.Branch != now {
			differ("branch", fmt.Sprintf("%q", plan.Branch), fmt.Sprintf("%q", now))
		}
		was, now := "", ""
		if plan.From != nil {
			was = plan.From.Dataset
		}
		if cfg.From != "" {
			now, _ = filepath.Abs(cfg.From)
		}
		if was != now {
			differ("from", fmt.Sprintf("%q", was), fmt.Sprintf("%q", now))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return &resumeRefused{mm: &manifest.ErrResumeMismatch{Dir: cfg.Out, Mismatches: diffs}}
}

// resumeRefused is a refused resume: ErrIncompatibleResume, with the typed
// mismatches.
type resumeRefused struct{ mm *manifest.ErrResumeMismatch }

func (e *resumeRefused) Error() string {
	return ErrIncompatibleResume.Error() + " " + e.mm.Error() +
		"\ngive the run's settings (the command printed when it stopped reproduces them), or collect into another directory"
}

func (e *resumeRefused) Unwrap() []error { return []error{ErrIncompatibleResume, e.mm} }
