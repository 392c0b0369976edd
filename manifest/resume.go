package manifest

import (
	"fmt"
)

// This file is the one rule for what a resume accepts of a provider's
// settings: collect's -resume and serve's apply it.

// ProviderParamShapes says, per provider and setting, whether a different
// value changes what a sandbox is, and so what an episode observes (true),
// or only how the run gets its sandboxes (false). A resume refuses a
// difference in the first kind and accepts one in the second. A setting not
// listed here — any setting of a provider this table does not know — counts
// as shaping: when in doubt, refuse. The names are the providers' own
// (providers/local.ParamFork, providers/docker.Param*); a test checks that
// every setting a registered provider accepts is listed.
var ProviderParamShapes = map[string]map[string]bool{
	"local": {
		// overlay or copy: the fork holds the same files either way, and
		// every episode row records the method (reset_origin).
		"fork": false,
		// The process limit of every sandbox: a command may hit it.
		"pids": true,
	},
	"docker": {
		"image":   true,  // the filesystem and userland commands run in
		"network": true,  // what commands can reach
		"init":    true,  // PID 1 and how orphans are reaped, visible to commands (ps, zombies)
		"sweep":   false, // start-up cleaning of what dead runs left: not about this run's sandboxes
		// The default limits of sandboxes whose task sets none: a command
		// may hit them (an OOM kill, a fork that fails).
		"pids":      true,
		"memory_mb": true,
		"cpus":      true,
		// fifo or the engine's exec stream: the same bytes either way
		// (providers/docker TestOutputPathsAgree); timing only.
		"output": false,
		// When a named image is pulled: the same image name is asked for
		// either way (a tag that moved in its registry between two
		// invocations changes episodes whatever this says).
		"pull": false,
		// gVisor's kernel instead of the host's: what commands see.
		"runtime": true,
	},
	"gvisor": {
		"image":     true, // the filesystem and userland commands run in
		"rootfs":    true,
		"network":   true, // what commands can reach
		"platform":  true, // ptrace or kvm: what a restore can read, and timing
		"runsc":     true, // another gVisor kernel
		"pids":      true, // the default limits: a command may hit them
		"memory_mb": true,
		"cpus":      true,
		// Where goldens are kept across runs, where runsc logs, how long a
		// boot may take, the start-up cleaning: not what a sandbox is (a
		// stored golden is one of the same task, rootfs, limits and runsc).
		"goldens":      false,
		"debug_log":    false,
		"boot_timeout": false,
		"sweep":        false,
	},
}

// PolicyOptionShapes says, per policy and option, whether a different value
// changes what the policy does in an episode (true) or only how it reaches
// its server (false). As for providers, an option not listed counts as
// shaping. A test (collect's) checks that every option policy/openai knows is listed.
var PolicyOptionShapes = map[string]map[string]bool{
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

// RetiredProviderParams are settings providers no longer accept, with
// whether they shaped a sandbox. Runs collected with them still carry them
// in their manifests; a resume, which cannot pass them any more, compares
// them by this table, so a setting that only changed timing does not
// refuse the resume of an old run.
var RetiredProviderParams = map[string]map[string]bool{
	"docker": {
		// The provider's own standby of started forks, replaced by the
		// pool's (-standby): timing only.
		"standby": false,
	},
}

// ProviderSettingShapes reports whether a different value of a provider's
// setting (current or retired) changes what a sandbox is; a setting of a
// provider the tables do not know does.
func ProviderSettingShapes(provider, key string) bool {
	if v, ok := RetiredProviderParams[provider][key]; ok {
		return v
	}
	if v, ok := ProviderParamShapes[provider][key]; ok {
		return v
	}
	return true
}

func settingValue(v string, set bool) string {
	if !set {
		return "none (the default)"
	}
	return fmt.Sprintf("%q", v)
}
