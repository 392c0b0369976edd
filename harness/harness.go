// Package harness owns the agent harnesses forkline runs inside sandboxes:
// for each (Claude Code, Codex, opencode, and any command) the npm package
// and version it is pinned to (a package.json and package-lock.json
// embedded here, installed with npm ci), the install's content-keyed cache
// directory, where in the install its executable is, and how it is
// launched non-interactively against forkline's model gateway — its
// command line, permission flags, configuration file and environment
// (telemetry and updates off, HOME in a scratch directory), written as
// one shell script the sandbox runs.
//
// It knows npm, the harnesses' command lines and configuration formats.
// It does not know the gateway's protocols, sandboxes or datasets: the
// agent policy says where the gateway is and which credential to send.
package harness

import (
	"embed"
	"fmt"
	"path"
	"runtime"
	"slices"
	"strings"
)

// The harness names.
const (
	ClaudeCode = "claude-code"
	Codex      = "codex"
	OpenCode   = "opencode"
	// Command runs any program that reads OPENAI_BASE_URL and
	// OPENAI_API_KEY, or ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY.
	Command = "command"
)

// The APIs a harness speaks (the gateway's names).
const (
	APIMessages  = "anthropic-messages"
	APIResponses = "openai-responses"
	APIChat      = "openai-chat"
)

//go:embed npm
var pinned embed.FS

// Profile is how one installed harness is run.
type Profile struct {
	Name string
	// Package and Version are the npm package the harness is installed
	// from, as pinned by its lockfile.
	Package, Version string
	// API is the API its model calls use.
	API string
	// Static reports that its executable is statically linked (it runs in
	// any image); the others need a glibc userland (forkline/debian).
	Static bool
	// binary is the executable's path inside the install, per GOARCH.
	binary map[string]string
}

var profiles = map[string]Profile{
	ClaudeCode: {Name: ClaudeCode, Package: "@anthropic-ai/claude-code", Version: "2.1.332", API: APIMessages,
		binary: map[string]string{
			"amd64": "node_modules/@anthropic-ai/claude-code-linux-x64/claude",
			"arm64": "node_modules/@anthropic-ai/claude-code-linux-arm64/claude",
		}},
	Codex: {Name: Codex, Package: "@openai/codex", Version: "0.171.0", API: APIResponses, Static: true,
		binary: map[string]string{
			"amd64": "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
			"arm64": "node_modules/@openai/codex-linux-arm64/vendor/aarch64-unknown-linux-musl/bin/codex",
		}},
	// opencode-ai installs its platform's build from an optional
	// dependency; its Linux x64 build is pinned directly, for npm ci
	// checks every optional dependency of opencode-ai against the
	// lockfile, and a registry mirror need not hold the other platforms'.
	OpenCode: {Name: OpenCode, Package: "opencode-linux-x64", Version: "1.18.33", API: APIChat,
		binary: map[string]string{
			"amd64": "node_modules/opencode-linux-x64/bin/opencode",
		}},
}

// Names are the harnesses forkline knows, sorted: the installable ones
// and command.
func Names() []string {
	out := []string{Command}
	for n := range profiles {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Installable are the harnesses installed from npm, sorted.
func Installable() []string {
	var out []string
	for n := range profiles {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Lookup returns the profile of an installable harness; an unknown name
// (or command, which installs nothing) fails naming the known ones.
func Lookup(name string) (Profile, error) {
	p, ok := profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("harness: unknown harness %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// Binary is the executable's path relative to the install's directory on
// this machine's architecture.
func (p Profile) Binary() (string, error) {
	b, ok := p.binary[runtime.GOARCH]
	if !ok {
		return "", fmt.Errorf("harness: %s has no build for %s/%s here", p.Name, runtime.GOOS, runtime.GOARCH)
	}
	return b, nil
}

// lockfiles are the profile's package.json and package-lock.json.
func (p Profile) lockfiles() (pkg, lock []byte, err error) {
	dir := path.Join("npm", p.Name)
	if pkg, err = pinned.ReadFile(path.Join(dir, "package.json")); err != nil {
		return nil, nil, err
	}
	if lock, err = pinned.ReadFile(path.Join(dir, "package-lock.json")); err != nil {
		return nil, nil, err
	}
	return pkg, lock, nil
}
