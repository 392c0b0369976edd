package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/internal/cli"
)

// resumeSettings are the settings a resume of the run needs: every
// setting of this one that -resume compares or that shapes how the rest
// runs, by flag name, in the order the help lists them, with paths made
// absolute so that they hold from any directory. -shard-count becomes the
// -shard i/n it stood for, and the LLM shorthands the -policy-opt keys
// they set. collect records them in the manifest (plan.config), and
// -resume -out DIR reads them back.
func resumeSettings(cfg collect.Config) []cli.Setting {
	var out []cli.Setting
	add := func(name string, values ...string) { out = append(out, cli.Setting{Name: name, Values: values}) }
	add("tasks", absPath(cfg.Tasks))
	add("provider", cfg.Provider)
	if len(cfg.ProviderParams) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(cfg.ProviderParams)) {
			kv = append(kv, k+"="+cfg.ProviderParams[k])
		}
		add("provider-opt", kv...)
	}
	add("replicas", strconv.Itoa(cfg.Replicas))
	if cfg.From != "" {
		// A run from a stored dataset takes its roots from it, not from
		// -repeats (which it refuses).
		add("from", absPath(cfg.From))
		if len(cfg.FromEpisodes) > 0 {
			add("episode", strings.Join(cfg.FromEpisodes, ","))
		}
	} else {
		add("repeats", strconv.Itoa(cfg.Repeats))
	}
	add("seed", strconv.FormatInt(cfg.Seed, 10))
	add("policy", cfg.Policy)
	if len(cfg.PolicyOptions) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(cfg.PolicyOptions)) {
			v := cfg.PolicyOptions[k]
			if k == "system_prompt_file" {
				// Its path does not matter to a resume (the prompt's text does).
				v = absPath(v)
			}
			kv = append(kv, k+"="+v)
		}
		add("policy-opt", kv...)
	}
	if cfg.ScriptFile != "" {
		add("script", absPath(cfg.ScriptFile))
	}
	add("reset", string(cfg.Reset))
	add("text", cfg.Capture.TextFlag())
	add("pixels", string(cfg.Capture.Pixels))
	add("a11y", string(cfg.Capture.A11y))
	add("tokens", string(cfg.Capture.Tokens))
	if cfg.Part.Count > 1 {
		add("shard", cfg.Part.String())
	}
	if cfg.Branch.IsSet() {
		add("branch", cfg.Branch.String())
	}
	if cfg.Standby != collect.StandbyAuto {
		add("standby", strconv.Itoa(cfg.Standby))
	}
	if cfg.MaxCreates > 0 {
		add("max-creates", strconv.Itoa(cfg.MaxCreates))
	}
	if cfg.MaxLoss.IsSet() {
		add("max-loss", cfg.MaxLoss.String())
	}
	add("grace", cfg.Grace.String())
	add("roll-mb", strconv.FormatInt(cfg.Shards.RollBytes>>20, 10))
	add("roll-interval", cfg.Shards.RollInterval.String())
	if cfg.WorkDir != "" {
		add("workdir", absPath(cfg.WorkDir))
	}
	return out
}

// recordedSettings is resumeSettings as the manifest's plan.config holds
// them.
func recordedSettings(cfg collect.Config) map[string][]string {
	m := map[string][]string{}
	for _, s := range resumeSettings(cfg) {
		m[s.Name] = s.Values
	}
	return m
}

// resumeCommand is the command that finishes a partial run: -resume -out
// DIR, the rest read from the configuration the manifest records
// (resumeSettings), shell-quoted, the path made absolute so that it works
// from any directory.
func resumeCommand(cfg collect.Config, quiet, asJSON bool) string {
	prog := os.Args[0]
	if strings.ContainsRune(prog, os.PathSeparator) {
		prog = absPath(prog)
	}
	args := []string{prog, "collect", "-resume", "-out", absPath(cfg.Out)}
	if quiet {
		args = append(args, "-quiet")
	}
	if asJSON {
		args = append(args, "-json")
	}
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " ")
}

// recordedPreset is -resume -out DIR's source of the other flags: the
// configuration DIR's manifest records. Flags given on the command line
// (or in -config) override it; a manifest without one (an older forkline's
// run) sets nothing, and the flags must be given as before.
func recordedPreset(f *cli.FlagSet) ([]cli.Setting, error) {
	out, _ := f.Value("out")
	if !f.Given("resume") || out == "" {
		return nil, nil
	}
	path := filepath.Join(out, "manifest.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil // no run to resume: collect says so, with its own words
	}
	var m struct {
		Plan *struct {
			Config map[string][]string `json:"config"`
		} `json:"plan"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Plan == nil || m.Plan.Config == nil {
		return nil, nil // unreadable or without a record: collect's resume check speaks
	}
	var settings []cli.Setting
	for _, name := range slices.Sorted(maps.Keys(m.Plan.Config)) {
		if _, ok := f.Value(name); !ok || name == "resume" || name == "force" || name == "config" || name == "out" {
			return nil, fmt.Errorf("forkline collect: %s: plan.config names %q, which is no setting of this forkline collect", path, name)
		}
		values := m.Plan.Config[name]
		if overridden(f, name) {
			continue
		}
		if name == "policy-opt" {
			values = slices.DeleteFunc(slices.Clone(values), func(kv string) bool {
				k, _, _ := strings.Cut(kv, "=")
				for _, l := range llmShortcuts {
					if l.key == k && f.OnCommandLine(l.flag) {
						return true // the command line's -model (say) is the one to compare
					}
				}
				return false
			})
		}
		settings = append(settings, cli.Setting{Name: name, Values: values, Where: path + " (plan.config)"})
	}
	return settings, nil
}

// captureFlags are the flags -capture FILE stands for.
var captureFlags = []string{"text", "pixels", "a11y", "tokens"}

// overridden reports whether the recorded flag name is not applied because
// the command line gave one that says the same thing another way: a
// command line that names -policy names its options too (the recorded ones
// are another policy's, or the same one's, and the resume compares what
// the command line says); -capture FILE stands for -text, -pixels, -a11y
// and -tokens, and they for it. The resume's comparison then refuses what
// differs from the run, as it did before the run was recorded.
func overridden(f *cli.FlagSet, name string) bool {
	if f.OnCommandLine("policy") && (name == "policy-opt" || name == "script" || slices.ContainsFunc(llmShortcuts, func(l struct{ flag, key, arg string }) bool { return l.flag == name })) {
		return true
	}
	if slices.Contains(captureFlags, name) && f.OnCommandLine("capture") {
		return true
	}
	if name == "capture" && slices.ContainsFunc(captureFlags, f.OnCommandLine) {
		return true
	}
	// -shard i/n and -shard-count n name the part two ways: a Slurm or
	// Kubernetes task that is requeued runs its -shard-count command again
	// (CI: the README's Slurm array's requeued task was refused, exit 2,
	// for giving both).
	return name == "shard" && f.OnCommandLine("shard-count") || name == "shard-count" && f.OnCommandLine("shard")
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellQuote quotes s for a POSIX shell: as is when it holds only safe
// characters, else in single quotes (a single quote as '\”).
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
