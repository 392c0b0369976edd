package providertest

import (
	"context"
	"fmt"
	"testing"
	"time"

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

// The reset workload of BenchReset: a small task, 200 files of 4 KiB in
// its spec and a setup that builds 50 more, and a first command that reads
// what the setup made. A real task's setup (installing packages, building a
// repository) costs far more, so the ratios BenchReset reports are a floor
// on what forking saves.
const (
	resetSetup      = `mkdir -p build && i=0; while [ $i -lt 50 ]; do echo "object $i" > build/o$i.txt; i=$((i+1)); done`
	resetFirstExec  = `cat build/o49.txt`
	resetFirstWants = "object 49\n"
)

func resetSpec() providers.Spec {
	files := make(map[string][]byte, 200)
	for i := range 200 {
		files[fmt.Sprintf("src/d%d/f%d.txt", i%10, i)] = make([]byte, 4096)
	}
	return providers.Spec{Files: files}
}

// BenchReset measures a provider's reset latency, what every episode of a
// run waits for before its first step, in two sub-benchmarks over one
// provider:
//
//   - recreate: Create from the spec, run the setup, then the first exec —
//     what a run without checkpoints pays per episode;
//   - fork: Fork of a golden checkpoint (the same spec and setup, made once,
//     untimed), then the first exec.
//
// The first exec reads a file the setup wrote, so a reset that loses the
// setup's work fails the benchmark instead of looking fast. Closing the
// sandbox is not timed: the pool does it after the episode. Each
// sub-benchmark reports its time as a ratio of recreate's in the same run
// (metric x-recreate), and the benchmark logs both with the speed-up, so
// providers compare by ratios measured on one machine at one moment, not
// by absolute times. A provider that cannot checkpoint skips fork and says
// so: it never fakes one.
//
// open is called once; BenchReset closes the provider. Every provider's
// tests run it as BenchmarkReset:
//
//	func BenchmarkReset(b *testing.B) {
//		providertest.BenchReset(b, func(b *testing.B) providers.Provider { return open(b) })
//	}
func BenchReset(b *testing.B, open func(b *testing.B) providers.Provider) {
	b.Helper()
	p := open(b)
	if p == nil {
		b.Fatal("open returned a nil provider")
	}
	defer func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		if err := p.Close(ctx); err != nil {
			b.Errorf("provider Close: %v", err)
		}
	}()
	spec := resetSpec()
	setup := runtime.Action{Kind: runtime.ActExec, Cmd: resetSetup, TimeoutMS: 60_000}
	var recreate, fork float64 // mean ns per reset

	b.Run("recreate", func(b *testing.B) {
		recreate = timeResets(b, func(ctx context.Context) (providers.Sandbox, error) {
			sb, err := p.Create(ctx, spec)
			if err != nil {
				return nil, err
			}
			return sb, mustSucceed(ctx, sb, setup)
		})
		b.ReportMetric(1, "x-recreate")
	})
	caps := p.Capabilities()
	if !caps.Checkpoint || !caps.Fork {
		b.Logf("reset of %s: recreate %s; it cannot checkpoint, so every reset is a recreate", p.Name(), nsText(recreate))
		return
	}
	b.Run("fork", func(b *testing.B) {
		ctx := b.Context()
		golden, err := p.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		defer golden.Close(context.WithoutCancel(ctx))
		if err := mustSucceed(ctx, golden, setup); err != nil {
			b.Fatal(err)
		}
		cp, err := p.Checkpoint(ctx, golden, "bench-reset")
		if err != nil {
			b.Fatal(err)
		}
		defer p.Release(context.WithoutCancel(ctx), cp)
		fork = timeResets(b, func(ctx context.Context) (providers.Sandbox, error) { return p.Fork(ctx, cp) })
		if recreate > 0 {
			b.ReportMetric(fork/recreate, "x-recreate")
		}
	})
	if recreate > 0 && fork > 0 {
		verdict := fmt.Sprintf("%.1fx faster", recreate/fork)
		if fork > recreate {
			verdict = fmt.Sprintf("%.1fx slower: this setup is cheaper than the fork", fork/recreate)
		}
		b.Logf("reset of %s (%s forks): fork %s, recreate %s: a fork costs %.3f of a recreate (%s)",
			p.Name(), caps.ForkMethod, nsText(fork), nsText(recreate), fork/recreate, verdict)
	}
}

// timeResets times reset followed by the first exec, b.Loop times, and
// returns the mean in nanoseconds. Closing each sandbox is not timed.
func timeResets(b *testing.B, reset func(ctx context.Context) (providers.Sandbox, error)) float64 {
	b.Helper()
	ctx := b.Context()
	first := runtime.Action{Kind: runtime.ActExec, Cmd: resetFirstExec, TimeoutMS: 60_000}
	var total time.Duration
	n := 0
	for b.Loop() {
		began := time.Now()
		sb, err := reset(ctx)
		if err == nil {
			var obs runtime.Observation
			if obs, err = sb.Act(ctx, first); err == nil && (obs.Error || obs.Text() != resetFirstWants) {
				err = fmt.Errorf("the first exec after the reset %q: exit %d, %q, want %q: the reset lost the setup's work",
					resetFirstExec, obs.ExitCode, obs.Text(), resetFirstWants)
			}
		}
		total += time.Since(began)
		n++
		b.StopTimer()
		if sb != nil {
			_ = sb.Close(context.WithoutCancel(ctx))
		}
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	if n == 0 {
		return 0
	}
	return float64(total.Nanoseconds()) / float64(n)
}

func mustSucceed(ctx context.Context, sb providers.Sandbox, a runtime.Action) error {
	obs, err := sb.Act(ctx, a)
	if err != nil {
		return err
	}
	if obs.Error {
		return fmt.Errorf("%q: exit %d: %.300s", a.Cmd, obs.ExitCode, obs.Text())
	}
	return nil
}

func nsText(ns float64) string { return time.Duration(ns).Round(10 * time.Microsecond).String() }
