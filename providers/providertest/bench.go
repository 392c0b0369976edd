package providertest

import (
	"fmt"
	"testing"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// DrainCommand prints n zero bytes in 64 KiB writes with dd, which is fast
// in busybox and coreutils alike, so that what is measured is the provider
// draining the output, not the command making it.
func DrainCommand(n int64) string {
	const block = 64 << 10
	return fmt.Sprintf("dd if=/dev/zero bs=%d count=%d 2>/dev/null", block, (n+block-1)/block)
}

// BenchExecOutput measures how fast p drains a command's output: each
// iteration is one exec of cmd, which must print exactly n bytes; b reports
// MB/s. Run it with the same cmd and n for two providers in one process to
// compare them.
func BenchExecOutput(b *testing.B, p providers.Provider, cmd string, n int64) {
	b.Helper()
	sb, err := p.Create(b.Context(), providers.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close(b.Context())
	a := runtime.Action{Kind: runtime.ActExec, Cmd: cmd, TimeoutMS: 600_000}
	b.SetBytes(n)
	for b.Loop() {
		obs, err := sb.Act(b.Context(), a)
		if err != nil {
			b.Fatal(err)
		}
		if obs.Error || obs.OutputBytes != n {
			b.Fatalf("%q: exit %d, %d bytes, want %d: %.200s", cmd, obs.ExitCode, obs.OutputBytes, n, obs.Text())
		}
	}
}
