// Package script is the scripted policy: it replays a fixed list of canonical
// actions, one per step, such as a task's solution or a file of actions. It
// is how datasets are made without a model (demonstrations, smoke runs,
// environment regression) and the baseline every other policy is compared to.
//
// It knows runtime actions only; where the list comes from (a task spec, a
// JSONL file) is the caller's business, with LoadFile for the file case.
package script

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/forkline/forkline/runtime"
)

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
