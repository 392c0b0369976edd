package main

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/collect"
)

// resumeCommand is the command that finishes a partial run: -resume and
// every setting of this one that -resume compares or that shapes how the
// rest runs, as flags, shell-quoted, with paths made absolute so that it
// works from any directory. -shard-count becomes the -shard i/n it stood
// for, and the LLM shorthands the -policy-opt keys they set.
func resumeCommand(cfg collect.Config, quiet, asJSON bool) string {
	prog := os.Args[0]
	if strings.ContainsRune(prog, os.PathSeparator) {
		prog = absPath(prog)
	}
	args := []string{prog, "collect", "-resume", "-tasks", absPath(cfg.Tasks), "-out", absPath(cfg.Out), "-provider", cfg.Provider}
	for _, k := range slices.Sorted(maps.Keys(cfg.ProviderParams)) {
		args = append(args, "-provider-opt", k+"="+cfg.ProviderParams[k])
	}
	args = append(args, "-replicas", strconv.Itoa(cfg.Replicas))
	if cfg.From != "" {
		// A run from a stored dataset takes its roots from it, not from
		// -repeats (which it refuses).
		args = append(args, "-from", absPath(cfg.From))
		if len(cfg.FromEpisodes) > 0 {
			args = append(args, "-episode", strings.Join(cfg.FromEpisodes, ","))
		}
	} else {
		args = append(args, "-repeats", strconv.Itoa(cfg.Repeats))
	}
	args = append(args, "-seed", strconv.FormatInt(cfg.Seed, 10), "-policy", cfg.Policy)
	for _, k := range slices.Sorted(maps.Keys(cfg.PolicyOptions)) {
		v := cfg.PolicyOptions[k]
		if k == "system_prompt_file" {
			// Its path does not matter to a resume (the prompt's text does).
			v = absPath(v)
		}
		args = append(args, "-policy-opt", k+"="+v)
	}
	if cfg.ScriptFile != "" {
		args = append(args, "-script", absPath(cfg.ScriptFile))
	}
	args = append(args, "-reset", string(cfg.Reset),
		"-text", cfg.Capture.TextFlag(), "-pixels", string(cfg.Capture.Pixels), "-a11y", string(cfg.Capture.A11y), "-tokens", string(cfg.Capture.Tokens))
	if cfg.Part.Count > 1 {
		args = append(args, "-shard", cfg.Part.String())
	}
	if cfg.Branch.IsSet() {
		args = append(args, "-branch", cfg.Branch.String())
	}
	if cfg.Standby != collect.StandbyAuto {
		args = append(args, "-standby", strconv.Itoa(cfg.Standby))
	}
	if cfg.MaxCreates > 0 {
		args = append(args, "-max-creates", strconv.Itoa(cfg.MaxCreates))
	}
	if cfg.MaxLoss.IsSet() {
		args = append(args, "-max-loss", cfg.MaxLoss.String())
	}
	args = append(args, "-grace", cfg.Grace.String(),
		"-roll-mb", strconv.FormatInt(cfg.Shards.RollBytes>>20, 10), "-roll-interval", cfg.Shards.RollInterval.String())
	if cfg.WorkDir != "" {
		args = append(args, "-workdir", absPath(cfg.WorkDir))
	}
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
