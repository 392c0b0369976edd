package collect

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"slices"

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

// scriptPolicy replays -script FILE, or else each task's solution. It has
// no options: one given is refused by name rather than ignored.
func scriptPolicy(cfg Config, t task.Spec, _ Episode) (runtime.Policy, error) {
	for _, k := range slices.Sorted(maps.Keys(cfg.PolicyOptions)) {
		return nil, fmt.Errorf("collect: -policy script has no option %q (it takes none; -script FILE replays a file of actions)", k)
	}
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
// cfg.Log. A fresh policy, and so a fresh conversation, per episode. A
// sampling seed option is mixed with the episode id, so repeats of a task
// sample differently while a rerun of the same episode sends the same seed.
func openaiPolicy(cfg Config, _ task.Spec, ep Episode) (runtime.Policy, error) {
	oc, err := openai.ParseOptions(cfg.PolicyOptions)
	if err != nil {
		return nil, fmt.Errorf("collect: -policy openai: %w", err)
	}
	if oc.Seed != nil && ep.ID != "" {
		s := episodeSeed(*oc.Seed, ep.ID)
		oc.Seed = &s
	}
	if cfg.Log != nil {
		oc.Logf = func(format string, args ...any) {
			fmt.Fprint(cfg.Log, "collect: "+fmt.Sprintf(format, args...)+"\n")
		}
	}
	return openai.New(oc)
}

// episodeSeed mixes a base seed with an episode id into a non-negative
// int64 (servers reject negative seeds).
func episodeSeed(base int64, episodeID string) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", base, episodeID)
	return int64(h.Sum64() >> 1)
}

// policyRecord is the policy as the manifest records it: its name, the
// options as given, and for policies that talk to a model the effective
// conversation settings (defaults applied), which exporters read to rebuild
// the exact messages the model saw.
// The script file's sha256 is recorded too: a resume compares the actions,
// not the file's name.
func policyRecord(cfg Config) (json.RawMessage, error) {
	f, err := policyFields(cfg)
	if err != nil {
		return nil, err
	}
	return json.Marshal(f)
}

func policyFields(cfg Config) (policyRecordFields, error) {
	sum := ""
	if cfg.ScriptFile != "" {
		data, err := os.ReadFile(cfg.ScriptFile)
		if err != nil {
			return policyRecordFields{}, fmt.Errorf("collect: -script: %w", err)
		}
		h := sha256.Sum256(data)
		sum = hex.EncodeToString(h[:])
	}
	opts := cfg.PolicyOptions
	if opts == nil {
		opts = map[string]string{}
	}
	rec := policyRecordFields{Name: cfg.Policy, ScriptFile: cfg.ScriptFile, ScriptSHA256: &sum, Options: opts}
	if cfg.Policy == "openai" {
		oc, err := openai.ParseOptions(cfg.PolicyOptions)
		if err != nil {
			return policyRecordFields{}, fmt.Errorf("collect: -policy openai: %w", err)
		}
		conv, err := oc.Conversation()
		if err != nil {
			return policyRecordFields{}, fmt.Errorf("collect: -policy openai: %w", err)
		}
		rec.Conversation = conv
	}
	return rec, nil
}
