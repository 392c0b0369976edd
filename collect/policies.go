package collect

import (
	"fmt"

	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/task"
)

// openPolicy opens cfg.Policy with cfg's options, checks it against every
// task before the run starts (a script policy on a task without a
// solution is refused here, not episode by episode), and makes the record
// the manifest keeps. Retries and other warnings of the policy go to logf,
// its notes (the token path it chose) to infof.
func openPolicy(cfg Config, specs []task.Spec, logf, infof func(string, ...any)) (policy.Source, manifest.Policy, error) {
	opts := policy.Options{Params: cfg.PolicyOptions, ScriptFile: cfg.ScriptFile, Log: logf, Info: infof}
	src, err := policy.Open(cfg.Policy, opts)
	if err != nil {
		return nil, manifest.Policy{}, fielderr.New("collect", "Policy", cfg.Policy, err)
	}
	for i := range specs {
		pol, err := src.NewPolicy(policyEpisode(&specs[i], "", 0, cfg.Seed, cfg.Provider))
		if err != nil {
			return nil, manifest.Policy{}, fmt.Errorf("collect: task %s (%s): %w", specs[i].ID, specs[i].Source, err)
		}
		if _, ok := pol.(runtime.SelfDriving); ok && (cfg.Branch.IsSet() || cfg.From != "") {
			return nil, manifest.Policy{}, fielderr.Sentence("collect", "Policy", cfg.Policy, "runs its episodes itself (an agent harness inside the sandbox), so they cannot branch (Branch, From): forks copy files, not the harness's process").Mentions("Branch", "From")
		}
	}
	rec, err := manifest.NewPolicy(cfg.Policy, opts, src)
	if err != nil {
		return nil, manifest.Policy{}, fmt.Errorf("collect: %w", err)
	}
	return src, rec, nil
}

// policyEpisode is what a policy is told of an episode of t: what it needs
// to decide, nothing of the task's files, setup or verifier.
// Its Shell is the task's, or aci.ShellPersistentForked for a persistent
// shell on a provider (named by provider) whose forks go on with it.
func policyEpisode(t *task.Spec, id string, repeat int, seed int64, provider string) policy.Episode {
	caps, _ := providers.Declared(provider)
	return policy.Episode{ID: id, Repeat: repeat, Seed: seed, Instruction: t.Instruction, Solution: t.Solution,
		Actions: t.AllowedActions(), Shell: policy.ExecShell(t.Shell, caps.ForksMemory)}
}
