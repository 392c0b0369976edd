package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Launch is one run of a harness in a sandbox: everything its script
// needs, as the sandbox sees it.
type Launch struct {
	// Harness is a profile's name or Command.
	Harness string
	// Binary is the executable's path in the sandbox (installed harnesses).
	Binary string
	// Cmd is the command line of Harness == Command, run by sh.
	Cmd string
	// Instruction is the task's instruction, the harness's prompt.
	Instruction string
	// BaseURL is the gateway as the harness reaches it, without /v1
	// (http://127.0.0.1:PORT).
	BaseURL string
	// Credential is the episode's API key for the gateway.
	Credential string
	// Model is the model name the harness is told to use.
	Model string
	// Home is a scratch directory in the sandbox, outside the workspace,
	// made fresh and removed at the end: HOME and the configuration.
	Home string
	// Relay, when set, is the command that runs the harness relayed (its
	// loopback port carried to the gateway's socket); the harness's
	// command line follows it.
	Relay string
}

// ScriptExitSetup is the script's exit status when its scratch directory
// cannot be made: the harness never started.
const ScriptExitSetup = 97

// Script is the shell script (for sh -c, in the workspace) that runs l:
// it makes Home, writes the harness's configuration there, exports its
// environment, runs it, removes Home and exits with its status.
func Script(l Launch) (string, error) {
	if l.Home == "" || !strings.HasPrefix(l.Home, "/") {
		return "", errors.New("harness: the scratch directory must be an absolute path")
	}
	if strings.ContainsAny(l.Model, "\n\r\x00") {
		return "", fmt.Errorf("harness: model name %q holds a line break", l.Model)
	}
	var b strings.Builder
	b.WriteString("H=" + Quote(l.Home) + "\n")
	fmt.Fprintf(&b, "rm -rf \"$H\" && mkdir -p \"$H\" || { echo \"forkline: cannot make $H\" >&2; exit %d; }\n", ScriptExitSetup)
	env := []string{
		"HOME=$H", "XDG_CONFIG_HOME=$H/.config", "XDG_DATA_HOME=$H/.local/share",
		"XDG_CACHE_HOME=$H/.cache", "XDG_STATE_HOME=$H/.local/state",
	}
	files := map[string]string{}
	var argv []string
	v1 := strings.TrimRight(l.BaseURL, "/") + "/v1"
	switch l.Harness {
	case ClaudeCode:
		env = append(env,
			"IS_SANDBOX=1", // --dangerously-skip-permissions as root needs it
			"ANTHROPIC_BASE_URL="+Quote(l.BaseURL), "ANTHROPIC_API_KEY="+Quote(l.Credential),
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1",
			"DISABLE_ERROR_REPORTING=1", "DISABLE_BUG_COMMAND=1", "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1",
			"CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1")
		argv = []string{Quote(l.Binary), "-p", Quote(l.Instruction), "--dangerously-skip-permissions", "--model", Quote(l.Model)}
	case Codex:
		files[".codex/config.toml"] = codexConfig(v1, l.Model)
		env = append(env, "CODEX_HOME=$H/.codex", "FORKLINE_GATEWAY_KEY="+Quote(l.Credential), "CODEX_MANAGED_BY_NPM=1")
		argv = []string{Quote(l.Binary), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", Quote(l.Instruction)}
	case OpenCode:
		files[".config/opencode/opencode.json"] = opencodeConfig(v1, l.Credential, l.Model)
		env = append(env, "OPENCODE_CONFIG=$H/.config/opencode/opencode.json",
			"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1",
			"OPENCODE_DISABLE_SHARE=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1", "OPENCODE_DISABLE_CLAUDE_CODE=1",
			"OPENCODE_DISABLE_PROJECT_CONFIG=1", "OPENCODE_DISABLE_TERMINAL_TITLE=1")
		argv = []string{Quote(l.Binary), "run", "-m", Quote("forkline/" + l.Model), Quote(l.Instruction)}
	case Command:
		if strings.TrimSpace(l.Cmd) == "" {
			return "", errors.New("harness: harness=command needs cmd")
		}
		env = append(env,
			"OPENAI_BASE_URL="+Quote(v1), "OPENAI_API_KEY="+Quote(l.Credential),
			"ANTHROPIC_BASE_URL="+Quote(l.BaseURL), "ANTHROPIC_API_KEY="+Quote(l.Credential),
			"FORKLINE_MODEL="+Quote(l.Model), "FORKLINE_INSTRUCTION="+Quote(l.Instruction))
		argv = []string{"sh", "-c", Quote(l.Cmd), "forkline-agent", Quote(l.Instruction)}
	default:
		return "", fmt.Errorf("harness: unknown harness %q (known: %s)", l.Harness, strings.Join(Names(), ", "))
	}
	for _, name := range sortedKeys(files) {
		dir := name[:strings.LastIndex(name, "/")]
		fmt.Fprintf(&b, "mkdir -p \"$H\"/%s && printf '%%s' %s > \"$H\"/%s || exit %d\n", Quote(dir), Quote(files[name]), Quote(name), ScriptExitSetup)
	}
	b.WriteString("export " + strings.Join(env, " ") + "\n")
	if l.Relay != "" {
		b.WriteString(l.Relay + " -- ")
	}
	b.WriteString(strings.Join(argv, " ") + " </dev/null\n")
	b.WriteString("rc=$?\ncd / && rm -rf \"$H\"\nexit $rc\n")
	return b.String(), nil
}

// codexConfig is Codex's config.toml: the gateway as its one model
// provider (Responses API, the key from FORKLINE_GATEWAY_KEY), approvals
// and its own sandbox off (the fork is the sandbox), update checks,
// analytics and web search off.
func codexConfig(v1, model string) string {
	return fmt.Sprintf(`model = %s
model_provider = "forkline"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false

[model_providers.forkline]
name = "forkline gateway"
base_url = %s
env_key = "FORKLINE_GATEWAY_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
`, tomlString(model), tomlString(v1))
}

// opencodeConfig is opencode's opencode.json: the gateway as an
// OpenAI-compatible provider with the one model, sharing and updates off.
func opencodeConfig(v1, credential, model string) string {
	cfg := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{
			"forkline": map[string]any{
				"npm":     "@ai-sdk/openai-compatible",
				"name":    "forkline gateway",
				"options": map[string]any{"baseURL": v1, "apiKey": credential},
				"models":  map[string]any{model: map[string]any{"name": model}},
			},
		},
		"model":      "forkline/" + model,
		"autoupdate": false,
		"share":      "disabled",
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return string(b) + "\n"
}

// tomlString is s as a TOML basic string (JSON's escapes are TOML's).
func tomlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Quote is s single-quoted for sh.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
