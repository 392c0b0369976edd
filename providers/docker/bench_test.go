package docker

import (
	"context"
	"testing"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/providertest"
)

// drainBytes is the output size of BenchmarkExecOutput: 200 MB, rounded up
// to whole 64 KiB blocks (the same as providers/local's).
const drainBytes = 3052 * 64 << 10

// BenchmarkExecOutput measures how fast a 200 MB output drains, through
// the output FIFO (fifo) and through the exec stream (stream); compare with
// providers/local's BenchmarkExecOutput, or run benchmarks/drain.
func BenchmarkExecOutput(b *testing.B) {
	for _, mode := range []string{OutputFIFO, OutputStream} {
		b.Run(mode, func(b *testing.B) {
			engine(b)
			p, err := New(b.Context(), providers.Options{RunID: "bench-" + tagSafe(b.Name()), Params: map[string]string{ParamOutput: mode}})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			providertest.BenchExecOutput(b, p, providertest.DrainCommand(drainBytes), drainBytes)
		})
	}
}

// BenchmarkReset is the conformance reset benchmark (providertest.BenchReset):
// a fork of a committed checkpoint and its first exec against a fresh
// container with its setup, as a ratio measured in the same run.
// benchmarks/docker adds the baseline of the docker CLI and the pool's
// standby hand-off.
func BenchmarkReset(b *testing.B) {
	engine(b)
	providertest.BenchReset(b, func(b *testing.B) providers.Provider {
		p, err := New(b.Context(), providers.Options{RunID: "bench-" + tagSafe(b.Name())})
		if err != nil {
			b.Fatal(err)
		}
		return p
	})
}
