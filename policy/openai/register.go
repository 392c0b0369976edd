package openai

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"

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
	if opts.Info != nil {
		cfg.Infof = opts.Info
	}
	if _, err := cfg.Conversation(); err != nil {
		return nil, err
	}
	return source{cfg: cfg, probe: &prober{}, listed: &listedActions{}}, nil
}

// listedActions is, for a run whose system prompt lists the tools
// ({{tools}}: tool_mode=text's default prompt) and whose tools are each
// task's, the one action list the run's tasks share: the manifest records
// one rendered system prompt, so tasks that allow different actions cannot
// be collected together that way.
type listedActions struct {
	mu    sync.Mutex
	kinds []runtime.ActionKind
	shell string // and the one shell mode (exec's description says it)
	set   bool
}

// source makes one Policy, and so one conversation, per episode. Its
// policies share one prober: the server is asked what it offers once per
// run.
type source struct {
	cfg    Config
	probe  *prober
	listed *listedActions
}

// listsTools reports whether the configuration's system prompt lists the
// tools.
func (c Config) listsTools() bool {
	if c.SystemPrompt != "" {
		return strings.Contains(c.SystemPrompt, "{{tools}}")
	}
	return c.ToolMode == ToolsText
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
	cfg.shell = ep.Shell
	if cfg.listsTools() && (cfg.Actions == nil || ep.Shell != "") {
		s.listed.mu.Lock()
		defer s.listed.mu.Unlock()
		if !s.listed.set {
			s.listed.shell, s.listed.set = ep.Shell, true
		} else if s.listed.shell != ep.Shell {
			return nil, fmt.Errorf("openai: the system prompt lists the tools (tool_mode=text) and the run records one prompt, but this task's shell is %q and an earlier one's %q (the exec tool says which): collect them in separate runs", shellName(ep.Shell), shellName(s.listed.shell))
		}
	}
	if cfg.Actions == nil {
		// The tools fit the task: its allowed actions.
		cfg.Actions = ep.Actions
		if cfg.Actions != nil && cfg.listsTools() {
			if s.listed.kinds == nil {
				s.listed.kinds = slices.Clone(ep.Actions)
			} else if !slices.Equal(s.listed.kinds, ep.Actions) {
				return nil, fmt.Errorf("openai: the system prompt lists the tools (tool_mode=text) and the run records one prompt, but this task allows %s and an earlier one %s: collect them in separate runs, or set the actions option to one list", kindNames(ep.Actions), kindNames(s.listed.kinds))
			}
		}
	} else if ep.Actions != nil {
		for _, k := range cfg.Actions {
			if !slices.Contains(ep.Actions, k) {
				return nil, fmt.Errorf("openai: the task does not allow action %s, which the actions option offers (leave the option out to offer each task its own actions)", k)
			}
		}
	}
	return newPolicyWith(cfg, s.probe)
}

// Conversation implements policy.Conversational. A run whose prompt lists
// the tools of its tasks' one shared action list records that list.
func (s source) Conversation() (policy.Conversation, error) {
	cfg := s.cfg
	if cfg.listsTools() {
		s.listed.mu.Lock()
		if cfg.Actions == nil {
			cfg.Actions = slices.Clone(s.listed.kinds)
		}
		cfg.shell = s.listed.shell
		s.listed.mu.Unlock()
	}
	return cfg.Conversation()
}

func shellName(s string) string {
	if s == "" {
		return "fresh"
	}
	return s
}

// episodeSeed mixes a base seed with an episode id into a non-negative
// int64 (servers reject negative seeds).
func episodeSeed(base int64, episodeID string) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", base, episodeID)
	return int64(h.Sum64() >> 1)
}
