package local

import (
	"context"
	"testing"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// BenchmarkExecTrue measures one exec of "true" with each way of bounding
// processes this machine offers, so the cost of the limit is a ratio within
// one run.
func BenchmarkExecTrue(b *testing.B) {
	ctx := context.Background()
	p, err := New(providers.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	modes := []*pidsLimiter{{mode: PidsNone}, p.pids}
	for _, l := range modes {
		b.Run(l.mode, func(b *testing.B) {
			p.pids = l
			sb, err := p.Create(ctx, providers.Spec{})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Close(ctx)
			a := runtime.Action{Kind: runtime.ActExec, Cmd: "true"}
			for b.Loop() {
				if obs, err := sb.Act(ctx, a); err != nil || obs.Error {
					b.Fatal(err, obs.Text())
				}
			}
		})
	}
}
