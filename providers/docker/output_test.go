package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// TestOutputFIFO: on a local engine, output takes the FIFO, each sandbox
// sees only its own read-only directory, and the directories go with the
// sandboxes.
func TestOutputFIFO(t *testing.T) {
	p := open(t, nil)
	path, _ := p.OutputPath()
	require.Equal(t, "unknown", path, "nothing is known before the first sandbox")
	a, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	defer a.Close(context.Background())
	path, why := p.OutputPath()
	require.Equal(t, OutputFIFO, path, "the engine is on this host, so the probe must succeed: %s", why)

	obs := sh(t, a, "readlink /proc/self/fd/1; readlink /proc/self/fd/2; echo to-err >&2")
	lines := strings.Split(strings.TrimSpace(obs.Text()), "\n")
	require.Len(t, lines, 3, obs.Text())
	require.True(t, strings.HasPrefix(lines[0], OutputDir+"/"), "stdout is a FIFO in %s: %s", OutputDir, lines[0])
	require.Equal(t, lines[0], lines[1], "stderr is joined to stdout")
	require.Equal(t, "to-err", lines[2])

	// The command was let go through its start gate, a FIFO next to its
	// output (the wrapper's last argument), not by the wrapper's busy wait.
	obs = sh(t, a, `g=$(tr '\0' '\n' </proc/$PPID/cmdline | tail -n 1); case $g in `+OutputDir+`/*) [ -p "$g" ] && echo gated;; esac`)
	require.Equal(t, "gated\n", obs.Text())

	// Read-only, and nothing of another sandbox in it.
	b, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	obs = sh(t, a, "touch "+OutputDir+"/x; ls -A "+OutputDir+" | wc -l")
	require.Contains(t, obs.Text(), "Read-only file system")
	require.Contains(t, obs.Text(), "2\n", "only this exec's own FIFOs are there: its output and its start gate")
	bDir := b.(*sandbox).outDir
	require.DirExists(t, bDir)
	require.NoError(t, b.Close(t.Context()))
	require.NoDirExists(t, bDir, "Close removes the sandbox's directory")

	// A fork has a directory of its own.
	cp, err := p.Checkpoint(t.Context(), a, "out")
	require.NoError(t, err)
	defer p.Release(context.Background(), cp)
	f, err := p.Fork(t.Context(), cp)
	require.NoError(t, err)
	defer f.Close(context.Background())
	require.NotEqual(t, a.(*sandbox).outDir, f.(*sandbox).outDir)
	require.True(t, strings.HasPrefix(sh(t, f, "readlink /proc/self/fd/1").Text(), OutputDir+"/"))
}

// A background job that keeps the output FIFO open does not hold the exec
// beyond pipeGrace: the exec returns while the job still runs, with what
// was written before it ended.
func TestOutputFIFOBackgroundJob(t *testing.T) {
	p := open(t, map[string]string{ParamOutput: OutputFIFO})
	sb, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	defer sb.Close(context.Background())
	obs := sh(t, sb, "(sleep 30; echo late) & echo $! > bg.pid; echo now")
	require.Equal(t, "now\n", obs.Text())
	obs = sh(t, sb, `kill -0 "$(cat bg.pid)" && echo still-running`)
	require.Equal(t, "still-running\n", obs.Text(), "the exec did not wait for its background job")
}

// When a FIFO in the sandbox does not reach this process (the engine on
// another host or in a VM), the probe says so and output takes the exec
// stream; with output=fifo, Create fails instead.
func TestOutputFIFOProbeFails(t *testing.T) {
	for _, mode := range []string{OutputAuto, OutputFIFO} {
		t.Run(mode, func(t *testing.T) {
			p := open(t, map[string]string{ParamOutput: mode})
			// A container without the mount, whose directory here is not
			// the one it sees: what a remote engine gives.
			p.out.state = fifoBroken
			sb, err := p.Create(t.Context(), providers.Spec{})
			require.NoError(t, err)
			defer sb.Close(context.Background())
			p.out.state = fifoUnknown
			s := sb.(*sandbox)
			s.outDir = t.TempDir()
			err = p.out.probe(t.Context(), s)
			path, why := p.OutputPath()
			if mode == OutputFIFO {
				require.ErrorContains(t, err, "param output=fifo, but output FIFOs cannot work here")
				return
			}
			require.NoError(t, err)
			require.Equal(t, OutputStream, path)
			require.Contains(t, why, "could not open its FIFO")
			obs := sh(t, sb, "echo through the stream")
			require.Equal(t, "through the stream\n", obs.Text())
		})
	}
}

// The engine's words for a bind source that is not on its host, which
// startContainer recognises to go on without the output directory.
func TestBindSourceMissing(t *testing.T) {
	p := open(t, nil)
	missing := filepath.Join(t.TempDir(), "not-here")
	_, err := p.createAndStart(t.Context(), ImageBusybox, sandboxSpec{network: "none", outputCap: providers.DefaultOutputCap}, "", false, missing)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "bind source path does not exist"), "%v", err)
}

func TestSweepOutputDirs(t *testing.T) {
	base := t.TempDir()
	dead := filepath.Join(base, outputDirPrefix+"dead")
	require.NoError(t, os.Mkdir(dead, 0o711))
	require.NoError(t, os.WriteFile(filepath.Join(dead, "owner"), []byte("999999999 1\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dead, "1-ab"), 0o711))
	live := filepath.Join(base, outputDirPrefix+"live")
	require.NoError(t, os.Mkdir(live, 0o711))
	require.NoError(t, writeOutputOwner(live))
	fresh := filepath.Join(base, outputDirPrefix+"fresh") // no owner yet
	require.NoError(t, os.Mkdir(fresh, 0o711))
	other := filepath.Join(base, "not-ours")
	require.NoError(t, os.Mkdir(other, 0o755))

	require.NoError(t, sweepOutputDirs(base))
	require.NoDirExists(t, dead)
	require.DirExists(t, live)
	require.DirExists(t, fresh)
	require.DirExists(t, other)
}

// Exec output is the same bytes through the FIFO and the stream.
func TestOutputPathsAgree(t *testing.T) {
	cmd := `printf 'a\000b\377'; echo err >&2; head -c 3000 /dev/zero | tr '\000' x; printf '\n%s' end`
	var got []runtime.Observation
	for _, mode := range []string{OutputFIFO, OutputStream} {
		p := open(t, map[string]string{ParamOutput: mode, ParamCPUs: "1"})
		sb, err := p.Create(t.Context(), providers.Spec{OutputCap: 2048})
		require.NoError(t, err)
		got = append(got, sh(t, sb, cmd))
		require.NoError(t, sb.Close(t.Context()))
		path, _ := p.OutputPath()
		require.Equal(t, mode, path)
	}
	require.Equal(t, got[0].Output, got[1].Output, "fifo %q\nstream %q", got[0].Output, got[1].Output)
	require.Equal(t, got[0].OutputBytes, got[1].OutputBytes)
	require.True(t, got[0].Truncated)
}
