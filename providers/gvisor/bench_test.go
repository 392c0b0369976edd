package gvisor

import (
	"context"
	"testing"
	"time"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/providertest"
	"github.com/forkline/forkline/runtime"
)

// BenchmarkReset is the conformance reset benchmark (providertest.BenchReset):
// a restore of a memory checkpoint and its first exec against a fresh
// sandbox with its setup, as a ratio measured in the same run.
// benchmarks/gvisor adds a start that keeps a server in memory, a 512 MiB
// sandbox, the platforms and the standby hand-off.
func BenchmarkReset(b *testing.B) {
	needRunsc(b)
	rootfs := busyboxRootfs(b)
	providertest.BenchReset(b, func(b *testing.B) providers.Provider {
		p, err := New(b.Context(), providers.Options{Dir: b.TempDir(), Params: map[string]string{ParamRootfs: rootfs}})
		if err != nil {
			b.Fatal(err)
		}
		return p
	})
}

// BenchmarkExecOutput measures how fast a 20 MB output drains through
// runsc exec's stdout pipe.
func BenchmarkExecOutput(b *testing.B) {
	const n = 320 * 64 << 10
	p := open(b, nil)
	defer p.Close(context.Background())
	providertest.BenchExecOutput(b, p, providertest.DrainCommand(n), n)
}

// BenchmarkShellModes measures one small exec (`true`) with a fresh shell
// per command and in the persistent shell, in the same run: each
// iteration runs it once in each of two sandboxes. Reported: the wall time
// per exec of each mode and the ratio persistent/fresh. A persistent exec
// is one runsc exec (the script into the shell's FIFO) against the fresh
// mode's one (the wrapper), plus the frame read from the attached output.
func BenchmarkShellModes(b *testing.B) {
	p := open(b, nil)
	fresh, err := p.Create(b.Context(), providers.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer fresh.Close(context.Background())
	pers, err := p.Create(b.Context(), providers.Spec{Shell: providers.ShellPersistent})
	if err != nil {
		b.Fatal(err)
	}
	defer pers.Close(context.Background())
	a := runtime.Action{Kind: runtime.ActExec, Cmd: "true"}
	for _, sb := range []providers.Sandbox{fresh, pers} { // warm: the persistent shell starts
		if _, err := sb.Act(b.Context(), a); err != nil {
			b.Fatal(err)
		}
	}
	var took [2]time.Duration
	b.ResetTimer()
	for range b.N {
		for i, sb := range []providers.Sandbox{fresh, pers} {
			t0 := time.Now()
			obs, err := sb.Act(b.Context(), a)
			if err != nil || obs.ExitCode != 0 {
				b.Fatalf("exec: %v %s", err, obs.Text())
			}
			took[i] += time.Since(t0)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(took[0])/float64(time.Millisecond)/n, "fresh-ms/exec")
	b.ReportMetric(float64(took[1])/float64(time.Millisecond)/n, "persistent-ms/exec")
	b.ReportMetric(float64(took[1])/float64(took[0]), "persistent/fresh")
}
