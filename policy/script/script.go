// Package script is the scripted policy: it replays a fixed list of canonical
// actions, one per step, such as a task's solution or a file of actions. It
// is how datasets are made without a model (demonstrations, smoke runs,
// environment regression) and the baseline every other policy is compared to.
//
// It registers itself with package policy as "script": opened with a
// ScriptFile it replays that file in every episode, else each episode's
// Solution (a task's solution:). It takes no Params.
//
// It knows runtime actions and the policy contract only; where a solution
// comes from (a task spec) is the caller's business.
package script

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

// Name is the registry name of this policy.
const Name = "script"

func init() { policy.Register(Name, Open) }

// Open is the policy.Factory of the script policy. It refuses any Params
// (there are none to give, and one ignored would be a surprise) and loads
// opts.ScriptFile once, when given.
func Open(opts policy.Options) (policy.Source, error) {
	for _, k := range slices.Sorted(maps.Keys(opts.Params)) {
		return nil, fmt.Errorf("script: the script policy has no option %q (it takes none; -script FILE replays a file of actions)", k)
	}
	src := source{}
	if opts.ScriptFile != "" {
		acts, err := LoadFile(opts.ScriptFile)
		if err != nil {
			return nil, err
		}
		src.actions, src.file = acts, opts.ScriptFile
	}
	return src, nil
}

// source makes a Policy per episode over the file's actions, or the
// episode's solution. The actions are shared read-only.
type source struct {
	actions []runtime.Action
	file    string
}

func (s source) NewPolicy(ep policy.Episode) (runtime.Policy, error) {
	acts, from := s.actions, s.file
	if acts == nil {
		if len(ep.Solution) == 0 {
			return nil, fmt.Errorf("script: no solution to replay (add solution: to the task, or pass -script FILE)")
		}
		acts, from = ep.Solution, "the solution"
	}
	if ep.Actions != nil {
		for i, a := range acts {
			if !slices.Contains(ep.Actions, a.Kind) {
				return nil, fmt.Errorf("script: action %d of %s is %s, which the task does not allow", i+1, from, a.Kind)
			}
		}
	}
	return New(acts), nil
}

// Policy replays Actions in order. The action for step i is Actions[i-k],
// where k is the number of steps in the history that came before this policy
// started (so a script can resume a History). When the list runs out before a
// done action, the episode ends with runtime.ExitNoAction: a script that never
// says done did not finish.
type Policy struct {
	Actions []runtime.Action
}

// New returns a policy replaying actions.
func New(actions []runtime.Action) *Policy { return &Policy{Actions: actions} }

// Decide returns the next scripted action.
func (p *Policy) Decide(ctx context.Context, h runtime.History) (runtime.Decision, error) {
	if err := ctx.Err(); err != nil {
		return runtime.Decision{}, err
	}
	i := len(h.Steps)
	if i >= len(p.Actions) {
		return runtime.Decision{Stop: runtime.ExitNoAction,
			Detail: fmt.Sprintf("script: the %d scripted actions ran out without done", len(p.Actions))}, nil
	}
	return runtime.Decision{Action: p.Actions[i]}, nil
}

// LoadFile reads actions from a file: one canonical action JSON object per
// line (blank lines and lines starting with # are skipped), or a single JSON
// array of actions. Errors name the file and line.
func LoadFile(path string) ([]runtime.Action, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	if trimmed := strings.TrimSpace(string(data)); strings.HasPrefix(trimmed, "[") {
		var out []runtime.Action
		if err := json.Unmarshal([]byte(trimmed), &out); err != nil {
			return nil, fmt.Errorf("script: %s: %w", path, err)
		}
		return out, nil
	}
	var out []runtime.Action
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 64*1024), 64<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		var a runtime.Action
		if err := json.Unmarshal([]byte(text), &a); err != nil {
			return nil, fmt.Errorf("script: %s:%d: %w", path, line, err)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("script: %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("script: %s holds no actions", path)
	}
	return out, nil
}
