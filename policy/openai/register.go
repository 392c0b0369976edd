package openai

import (
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

// Name is the registry name of this policy.
const Name = "openai"

func init() { policy.Register(Name, Open) }

// Open is the policy.Factory of the LLM policy: opts.Params are the string
// options of ParseOptions (see OptionNames), checked once; opts.Log
// receives the retried requests. opts.ScriptFile means nothing here and is
// ignored, as it always was.
func Open(opts policy.Options) (policy.Source, error) {
	cfg, err := ParseOptions(opts.Params)
	if err != nil {
		return nil, err
	}
	if opts.Log != nil {
		cfg.Logf = opts.Log
	}
	if _, err := cfg.Conversation(); err != nil {
		return nil, err
	}
	return source{cfg: cfg, probe: &prober{}}, nil
}

// source makes one Policy, and so one conversation, per episode. Its
// policies share one prober: the server is asked what it offers once per
// run.
type source struct {
	cfg   Config
	probe *prober
}

// NewPolicy returns ep's policy. A sampling seed option is mixed with the
// episode's id, so repeats of a task sample differently while a rerun of
// the same episode sends the same seed. An action the task does not allow
// but this configuration offers is refused: the manifest records one list
// of offered tools for the run, and a policy never offers other ones.
func (s source) NewPolicy(ep policy.Episode) (runtime.Policy, error) {
	cfg := s.cfg
	if cfg.Seed != nil && ep.ID != "" {
		seed := episodeSeed(*cfg.Seed, ep.ID)
		cfg.Seed = &seed
	}
	if ep.Actions != nil {
		for _, k := range cfg.Actions {
			if !slices.Contains(ep.Actions, k) {
				return nil, fmt.Errorf("openai: the task does not allow action %s, which the policy offers (set the actions option)", k)
			}
		}
	}
	return newPolicyWith(cfg, s.probe)
}

// Conversation implements policy.Conversational.
func (s source) Conversation() (policy.Conversation, error) { return s.cfg.Conversation() }

// episodeSeed mixes a base seed with an episode id into a non-negative
// int64 (servers reject negative seeds).
func episodeSeed(base int64, episodeID string) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", base, episodeID)
	return int64(h.Sum64() >> 1)
}
