package gvisor

import (
	"context"
	"testing"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/providertest"
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
