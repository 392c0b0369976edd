package collect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
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
		return nil, fmt.Errorf("collect: -resume: -out %s: %w", cfg.Out, err)
	}
	ds, err := shard.Open(cfg.Out)
	if errors.Is(err, shard.ErrNoDataset) {
		return nil, fmt.Errorf("collect: -resume: %s holds no run (no manifest.json)", cfg.Out)
	}
	if err != nil {
		return nil, fmt.Errorf("collect: -resume: %w", err)
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
			return nil, fmt.Errorf("collect: -resume: %w", err)
		}
	}
	p := &priorRun{manifest: m, kept: map[string]bool{}, cancelled: map[string]bool{}, branched: map[string]bool{}, tree: map[string]treeNode{}, tally: newSummary(0, 0)}
	for e, err := range ds.Episodes() {
		if err != nil {
			return nil, fmt.Errorf("collect: -resume: reading the kept episodes: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("collect: -resume: %w", err)
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
		p.tally.addKept(e, false)
	}
	for r, err := range ds.Rewards() {
		if err != nil {
			return nil, fmt.Errorf("collect: -resume: reading the kept rewards: %w", err)
		}
		if p.kept[r.EpisodeID] {
			p.tally.addReward(r)
		}
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

// policyOptionShapes says, per policy and option, whether a different value
// changes what the policy does in an episode (true) or only how it reaches
// its server (false). As for providers, an option not listed counts as
// shaping. A test checks that every option policy/openai knows is listed.
var policyOptionShapes = map[string]map[string]bool{
	"openai": {
		// A different server may serve another model or revision under the
		// same name (or, with no model option, whatever it serves).
		"base_url":    true,
		"model":       true,
		"temperature": true,
		"top_p":       true,
		"max_tokens":  true,
		"seed":        true,
		"tool_mode":   true,
		"actions":     true,
		// The cap changes what the model is shown.
		"observation_cap": true,
		// What the model is shown of a page, and how many images stay.
		"observe":    true,
		"max_images": true,
		// Whether token ids and logprobs are requested changes what is
		// captured (an RL record or none).
		"token_ids": true,
		"logprobs":  true,
		// The file's path may change; its text is compared through the
		// recorded conversation (the rendered system prompt).
		"system_prompt_file": false,
		// The token path, the client-side parsers, the template's
		// variables, whether reasoning goes back, which server kind the
		// requests are shaped for and which server renders new turns all
		// change the ids the model is given or how its text becomes
		// actions.
		"tokens":               true,
		"tool_parser":          true,
		"reasoning_parser":     true,
		"chat_template_kwargs": true,
		"send_reasoning":       true,
		"server":               true,
		"render_url":           true,
		// Where the key comes from, and how long and how often a request
		// is tried: they decide whether a request succeeds, not what the
		// model is asked or answers.
		"api_key_env": false,
		"timeout":     false,
		"retries":     false,
		"backoff":     false,
		"backoff_max": false,
	},
}

func shapes(table map[string]map[string]bool, name, key string) bool {
	if v, ok := table[name][key]; ok {
		return v
	}
	return true
}

// compatible refuses a resume that would produce other episodes than the
// run being resumed: other tasks or plan, another provider or a setting of
// it that changes what a sandbox is, another policy or option that changes
// what it does (now is this command's policy record), another capture
// policy. Every difference is listed, each with the run's value and this
// command's.
func compatible(m shard.Manifest, specs []task.Spec, cfg Config, now manifest.Policy) error {
	var diffs []string
	differ := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }

	oldHash, err := task.RecordHashes(m.Tasks)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrIncompatibleResume, err)
	}
	for _, s := range specs {
		h, ok := oldHash[s.ID]
		if !ok {
			differ("task %s is not in the run being resumed", s.ID)
			continue
		}
		if now := s.Hash(); h != now {
			differ("task %s changed since the run started (spec hash %.12s, was %.12s)", s.ID, now, h)
		}
		delete(oldHash, s.ID)
	}
	for _, id := range slices.Sorted(maps.Keys(oldHash)) {
		differ("task %s of the run being resumed is missing from -tasks", id)
	}

	if plan, err := manifest.DecodePlan(m.Plan); err == nil {
		if plan.Repeats != cfg.Repeats {
			differ("-repeats: the run used %d, this command gives %d", plan.Repeats, cfg.Repeats)
		}
		if plan.Seed != cfg.Seed {
			differ("-seed: the run used %d, this command gives %d", plan.Seed, cfg.Seed)
		}
		if plan.Part != manifest.Part(cfg.Part) {
			differ("-shard: the run collected part %s, this command collects part %s", plan.Part, cfg.Part)
		}
		if now := cfg.Branch.String(); plan.Branch != now {
			differ("-branch: the run used %q, this command gives %q", plan.Branch, now)
		}
		was, now := "", ""
		if plan.From != nil {
			was = plan.From.Dataset
		}
		if cfg.From != "" {
			now, _ = filepath.Abs(cfg.From)
		}
		if was != now {
			differ("-from: the run branched from %q, this command from %q", was, now)
		}
	}

	if m.Capture != nil {
		switch was, err := capture.DecodeManifest(m.Capture); {
		case err != nil:
			differ("capture policy: the run's entry %s is unreadable (%v), this command gives %s", compactJSON(m.Capture), err, cfg.Capture.MarshalManifest())
		case was != cfg.Capture:
			differ("capture policy: the run used %s, this command gives %s", compactJSON(m.Capture), cfg.Capture.MarshalManifest())
		}
	}

	// A manifest without a provider or policy entry was written by a run
	// that crashed before its first generation closed, by a build that
	// recorded them only then: nothing to compare, and Run records this
	// command's.
	if m.Provider != nil {
		was, err := manifest.DecodeProvider(m.Provider)
		if err != nil {
			return fmt.Errorf("%w: the manifest's provider entry is unreadable: %v", ErrIncompatibleResume, err)
		}
		if was.Name != cfg.Provider {
			differ("-provider: the run used %s, this command gives %s", was.Name, cfg.Provider)
		} else {
			diffs = append(diffs, was.SettingDiffs(cfg.ProviderParams)...)
		}
	}
	if m.Policy != nil {
		was, err := manifest.DecodePolicy(m.Policy)
		if err != nil {
			return fmt.Errorf("%w: the manifest's policy entry is unreadable: %v", ErrIncompatibleResume, err)
		}
		if was.Name != now.Name {
			differ("-policy: the run used %s, this command gives %s", was.Name, now.Name)
		} else {
			for _, k := range settingKeys(was.Options, now.Options) {
				o, okO := was.Options[k]
				n, okN := now.Options[k]
				if shapes(policyOptionShapes, now.Name, k) && (o != n || okO != okN) {
					differ("-policy-opt %s: the run used %s, this command gives %s", k, settingValue(o, okO), settingValue(n, okN))
				}
			}
			switch {
			case was.ScriptSHA256 != nil && *was.ScriptSHA256 != *now.ScriptSHA256:
				differ("-script: the run replayed %s, this command %s", scriptName(was.ScriptFile, *was.ScriptSHA256), scriptName(now.ScriptFile, *now.ScriptSHA256))
			case was.ScriptSHA256 == nil && (was.ScriptFile == "") != (now.ScriptFile == ""):
				differ("-script: the run replayed %s, this command %s", scriptName(was.ScriptFile, ""), scriptName(now.ScriptFile, ""))
			}
			if was.Conversation != nil {
				var nowConv policy.Conversation
				if now.Conversation != nil {
					nowConv = *now.Conversation
				}
				for _, k := range was.Conversation.Diff(nowConv) {
					differ("the conversation's %s differs from the run's (the model would be shown other messages)", k)
				}
			}
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("%w %s: this command differs from the run in what its episodes would be:\n  %s\n"+
		"pass the run's settings (the command printed when it stopped reproduces them), or collect into another -out",
		ErrIncompatibleResume, cfg.Out, strings.Join(diffs, "\n  "))
}

func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

func settingKeys(a, b map[string]string) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func settingValue(v string, set bool) string {
	if !set {
		return "none (the default)"
	}
	return fmt.Sprintf("%q", v)
}

func scriptName(file, sha string) string {
	switch {
	case file == "":
		return "each task's solution"
	case sha == "":
		return file
	}
	return fmt.Sprintf("%s (sha256 %.12s)", file, sha)
}
