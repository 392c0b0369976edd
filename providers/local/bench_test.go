package local_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/local"
	"github.com/forkline/forkline/providers/providertest"
)

// BenchmarkFork measures Fork plus Close of a fork of a small workspace
// (200 files of 4 KiB in 10 directories) with each fork method. For a large
// workspace see benchmarks/reset.
func BenchmarkFork(b *testing.B) {
	files := map[string][]byte{}
	for i := range 200 {
		files[fmt.Sprintf("d%d/f%d", i%10, i)] = make([]byte, 4096)
	}
	for _, method := range []string{local.ForkOverlay, local.ForkCopy} {
		b.Run(method, func(b *testing.B) {
			ctx := context.Background()
			p := openLocal(b, method)
			defer p.Close(ctx)
			sb, err := p.Create(ctx, providers.Spec{Files: files})
			if err != nil {
				b.Fatal(err)
			}
			cp, err := p.Checkpoint(ctx, sb, "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				f, err := p.Fork(ctx, cp)
				if err != nil {
					b.Fatal(err)
				}
				if err := f.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReset is the conformance reset benchmark (providertest.BenchReset)
// for each fork method: a fork and its first exec against a recreate with
// its setup, as a ratio measured in the same run.
func BenchmarkReset(b *testing.B) {
	for _, method := range []string{local.ForkOverlay, local.ForkCopy} {
		b.Run(method, func(b *testing.B) {
			providertest.BenchReset(b, func(b *testing.B) providers.Provider { return openLocal(b, method) })
		})
	}
}

// BenchmarkExecOutput measures how fast a 200 MB output drains through the
// local provider's pipe; compare with providers/docker's
// BenchmarkExecOutput (or run benchmarks/drain, which runs both at once).
func BenchmarkExecOutput(b *testing.B) {
	p := openLocal(b, local.ForkCopy)
	defer p.Close(context.Background())
	providertest.BenchExecOutput(b, p, providertest.DrainCommand(drainBytes), drainBytes)
}

// drainBytes is the output size of BenchmarkExecOutput: 200 MB, rounded up
// to whole 64 KiB blocks.
const drainBytes = 3052 * 64 << 10
