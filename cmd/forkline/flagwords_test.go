package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/replay"
	"github.com/forkline/forkline/serve"
)

// Every field a subcommand's map names is a field of the library's
// configuration, and every flag it names is one of the subcommand's flags
// (its help lists it), so a renamed field or flag cannot leave the words
// stale.
func TestFieldFlagsAreFields(t *testing.T) {
	for _, c := range []struct {
		subcommand string
		config     any
		flags      fieldFlags
	}{
		{"collect", collect.Config{}, collectFlags},
		{"serve", serve.Config{}, serveFlags},
		{"replay", replay.Config{}, replayFlags},
		{"export", export.Options{}, exportFlags},
	} {
		typ := reflect.TypeOf(c.config)
		help := execute(context.Background(), c.subcommand, "-h")
		require.Equal(t, 0, help.code, help.stderr)
		for field, flag := range c.flags {
			_, ok := typ.FieldByName(field)
			require.True(t, ok, "%s: %s is not a field of %s", c.subcommand, field, typ)
			require.Regexp(t, `^-[a-z][a-z0-9-]*$`, flag, "%s: %s", c.subcommand, field)
			require.Contains(t, help.stdout+help.stderr, "  "+flag+" ", "%s -h lists no %s (for %s)", c.subcommand, flag, field)
		}
	}
}

// inFlagWords keeps what the error wraps: exit codes are chosen by
// errors.Is after it (collect's ErrOutputExists is bad input), and adds
// the command's advice.
func TestFlagWordsKeepTheSentinel(t *testing.T) {
	err := inFlagWords(fmt.Errorf("%w: runs/demo", collect.ErrOutputExists), collectFlags)
	require.ErrorIs(t, err, collect.ErrOutputExists)
	require.Contains(t, err.Error(), "(use -resume to finish it or -force to replace it)")
}

// What a user of the binary reads names the flags, with one dash, where
// the libraries name their fields: one representative refusal of each
// kind, through the real binary, each exit 2 and changing nothing.
func TestRefusalsNameTheFlags(t *testing.T) {
	dir := t.TempDir()
	tasks, err := filepath.Abs("../../examples/tasks/fix-sum.yaml")
	require.NoError(t, err)
	foreign := filepath.Join(dir, "foreign")
	require.NoError(t, os.MkdirAll(foreign, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("not forkline's\n"), 0o644))
	nothing, out := filepath.Join(dir, "nothing"), filepath.Join(dir, "out")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"collect", "-tasks", tasks, "-out", out, "-branch", "at=0,width=2"}, `collect: -branch "at=0,width=2": at must be a whole number >= 1`},
		{[]string{"collect", "-tasks", tasks, "-out", out, "-max-loss", "101%"}, "collect: -max-loss 101%: want a count"},
		{[]string{"collect", "-tasks", tasks, "-out", out, "-resume", "-force"}, "collect: -resume and -force contradict each other"},
		{[]string{"collect", "-tasks", tasks, "-out", foreign}, "collect: -out " + foreign + " is not empty and holds no forkline run; choose an empty or new directory (-force replaces only a forkline run)"},
		{[]string{"collect", "-tasks", tasks, "-out", out, "-episode", "ab"}, "collect: -episode picks episodes of a stored dataset, and no -from is given"},
		{[]string{"collect", "-tasks", tasks, "-out", out, "-from", nothing, "-branch", "at=1,width=2"}, "collect: -from " + nothing + ": "},
		{[]string{"export", "-in", foreign, "-to", "verl-sft", "-out", out, "-rows", "step"}, "export: -rows is for hf, hf-disk, sft-tokens and verl-agent, not verl-sft"},
		{[]string{"export", "-in", foreign, "-to", "hf", "-out", "-"}, "export: -to hf writes a directory; -out - is for jsonl only"},
		{[]string{"export", "-in", foreign, "-to", "hf", "-out", out, "-split", "train=0.5"}, `export: -split "train=0.5": fractions sum to 0.5, not 1`},
		{[]string{"export", "-in", nothing, "-to", "hf", "-out", out}, "export: -in " + nothing + ": "},
		{[]string{"serve", "-tasks", tasks, "-out", foreign}, "serve: -out " + foreign + " is not empty and holds no forkline dataset"},
	} {
		before := treeHash(t, dir)
		cmd := forklineProcess(c.args[0], c.args[1:]...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%v", c.args)
		require.Equal(t, 2, exit.ExitCode(), "%v: %s", c.args, stderr.String())
		require.Contains(t, stderr.String(), c.want, "%v", c.args)
		// One spelling, and no Go field name where a flag belongs.
		require.NotRegexp(t, regexp.MustCompile(`(^|\s)--[a-z]`), stderr.String(), "%v", c.args)
		require.NotRegexp(t, regexp.MustCompile(`\b(Out|Resume|Force|From|FromEpisodes|Branch|MaxLoss|Inputs|Target|Rows|Split|Where) `), stderr.String(), "%v", c.args)
		require.Equal(t, before, treeHash(t, dir), "%v: a refused command changes nothing", c.args)
	}
}
