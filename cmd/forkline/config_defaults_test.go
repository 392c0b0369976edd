package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/replay"
	"github.com/forkline/forkline/serve"
)

// helpDefaults reads `forkline NAME -h` as printed: each flag's entry
// (its line and the indented lines under it, joined) and the default it
// ends with, "" when it shows none.
func helpDefaults(t *testing.T, name string) map[string]string {
	t.Helper()
	r := execute(context.Background(), name, "-h")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	entries := map[string]string{}
	flagLine := regexp.MustCompile(`^  -([a-z0-9-]+)`)
	var cur string
	for _, l := range strings.Split(r.stdout, "\n") {
		if m := flagLine.FindStringSubmatch(l); m != nil {
			cur = m[1]
			entries[cur] = strings.TrimSpace(l)
			continue
		}
		if cur != "" && strings.HasPrefix(l, strings.Repeat(" ", 10)) {
			entries[cur] += " " + strings.TrimSpace(l)
			continue
		}
		cur = ""
	}
	defaults := map[string]string{}
	shown := regexp.MustCompile(`\(default ([^()]*)\)$`)
	for name, e := range entries {
		if m := shown.FindStringSubmatch(e); m != nil {
			defaults[name] = m[1]
		} else {
			defaults[name] = ""
		}
	}
	return defaults
}

// The defaults `forkline collect|replay|serve -h` shows are the library's
// DefaultConfig: one source, so an embedding program and the command run
// alike (the command's defaults were literals of its own, and collect's
// library default of replicas was 1 where the command's was 4).
func TestHelpDefaultsAreDefaultConfig(t *testing.T) {
	c := collect.DefaultConfig()
	r := replay.DefaultConfig()
	s := serve.DefaultConfig()
	require.Zero(t, c.MaxCreates, "help shows what zero means")
	require.Equal(t, collect.StandbyAuto, c.Standby, "help shows what StandbyAuto means")
	require.Zero(t, r.PixelTolerance)
	require.Empty(t, r.Provider)
	require.Zero(t, s.MaxCheckpoints)
	require.Zero(t, s.MaxCreates)
	for _, cmd := range []struct {
		name string
		want map[string]string
	}{
		{"collect", map[string]string{
			"provider": c.Provider, "replicas": fmt.Sprint(c.Replicas), "repeats": fmt.Sprint(c.Repeats),
			"reset": string(c.Reset), "standby": "sized to the run: up to -replicas in all, the task the plan reaches first served first", "max-creates": "2 × -replicas", "policy": c.Policy,
			"text": c.Capture.TextFlag(), "pixels": string(c.Capture.Pixels), "a11y": string(c.Capture.A11y), "tokens": string(c.Capture.Tokens),
			"roll-mb": fmt.Sprint(c.Shards.RollBytes >> 20), "roll-interval": c.Shards.RollInterval.String(),
			"grace": c.Grace.String(), "seed": "",
		}},
		{"replay", map[string]string{
			"replicas": fmt.Sprint(r.Replicas), "compare": string(r.Mode), "pixel-tolerance": "",
			"provider": "the one the dataset was collected with",
		}},
		{"serve", map[string]string{
			"addr": s.Addr, "max-sessions": fmt.Sprint(s.MaxSessions), "idle-timeout": s.IdleTimeout.String(),
			"grace": s.Grace.String(), "max-checkpoints": "-max-sessions", "session-checkpoints": fmt.Sprint(s.SessionCheckpoints),
			"max-message-mb": fmt.Sprint(s.MaxMessageBytes >> 20), "message-budget-mb": fmt.Sprint(s.MessageBudget >> 20),
			"message-timeout": s.MessageTimeout.String(), "provider": s.Provider, "reset": string(s.Reset),
			"standby": "", "max-creates": "2 × -max-sessions",
			"text": s.Capture.TextFlag(), "pixels": string(s.Capture.Pixels), "a11y": string(s.Capture.A11y), "tokens": string(s.Capture.Tokens),
			"roll-mb": fmt.Sprint(s.Shards.RollBytes >> 20), "roll-interval": s.Shards.RollInterval.String(),
		}},
	} {
		got := helpDefaults(t, cmd.name)
		for flag, want := range cmd.want {
			v, ok := got[flag]
			require.True(t, ok, "forkline %s -h has no -%s", cmd.name, flag)
			require.Equal(t, want, v, "forkline %s -h: the default of -%s", cmd.name, flag)
		}
	}
	// And the figures themselves: the ones docs/cli.md promises.
	require.Equal(t, 4, c.Replicas)
	require.Equal(t, 4, r.Replicas)
	require.Equal(t, 64, s.MaxSessions)
}

// A negative -replicas is refused by forkline replay, exit 2, naming the
// flag, and the dataset is untouched; the library refuses it too (it used
// to turn a negative count into 4 and replay).
func TestReplayRefusesNegativeReplicas(t *testing.T) {
	in := filepath.Join(t.TempDir(), "run")
	_, err := collect.Run(context.Background(), collect.Config{Tasks: "../../examples/tasks/fix-sum.yaml", Out: in, WorkDir: t.TempDir()})
	require.NoError(t, err)
	before := treeHash(t, in)
	rec := filepath.Join(t.TempDir(), "rec")
	out, err := forklineProcess("replay", "-in", in, "-workdir", t.TempDir(), "-replicas", "-1", "-out", rec).CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v: %s", err, out)
	require.Equal(t, cli.ExitBadInput, exit.ExitCode(), "%s", out)
	require.Contains(t, string(out), "-replicas -1: want an integer >= 1")
	require.Equal(t, before, treeHash(t, in), "the dataset is byte-identical")
	require.NoDirExists(t, rec, "nothing is recorded")

	_, err = replay.Run(context.Background(), replay.Config{In: in, Replicas: -1, WorkDir: t.TempDir(), Record: rec})
	require.ErrorContains(t, err, "replay: Replicas is negative (-1)")
	require.Equal(t, before, treeHash(t, in))
	require.NoDirExists(t, rec)
}
