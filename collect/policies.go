package collect

import (
	"fmt"

	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/policy/script"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/task"
)

// policies holds the built-in policies; RegisterPolicy adds more.
var policies = map[string]PolicyFactory{
	"script": scriptPolicy,
	"openai": openaiPolicy,
}

// scriptPolicy replays -script FILE, or else each task's solution.
func scriptPolicy(cfg Config, t task.Spec) (runtime.Policy, error) {
	if cfg.ScriptFile != "" {
		acts, err := script.LoadFile(cfg.ScriptFile)
		if err != nil {
			return nil, err
		}
		return script.New(acts), nil
	}
	if len(t.Solution) == 0 {
		return nil, fmt.Errorf("collect: task %s (%s) has no solution for the script policy (add solution: or pass -script FILE)", t.ID, t.Source)
	}
	return script.New(t.Solution), nil
}

// openaiPolicy talks to an OpenAI-compatible server configured by
// cfg.PolicyOptions (see openai.OptionNames). Its retries are logged to
// cfg.Log. A fresh policy, and so a fresh conversation, per episode.
func openaiPolicy(cfg Config, _ task.Spec) (runtime.Policy, error) {
	oc, err := openai.ParseOptions(cfg.PolicyOptions)
	if err != nil {
		return nil, fmt.Errorf("collect: -policy openai: %w", err)
	}
	if cfg.Log != nil {
		oc.Logf = func(format string, args ...any) {
			fmt.Fprint(cfg.Log, "collect: "+fmt.Sprintf(format, args...)+"\n")
		}
	}
	return openai.New(oc)
}
