package docker

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// BenchmarkShellCPU measures the CPU one small exec costs with a fresh
// shell per command (today's wrapper: a shell, its timer, the command's
// shell) and in the persistent shell, in the same run: each iteration runs
// `true` once in each of two sandboxes. Reported per exec: the CPU the
// container's cgroup used (the engine's stats: what every replica pays in
// its sandbox) and the CPU of this process (the provider's side), each
// mode, and the ratio persistent/fresh of the container's.
func BenchmarkShellCPU(b *testing.B) {
	engine(b)
	p, err := New(b.Context(), providers.Options{RunID: "bench-" + tagSafe(b.Name())})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
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
	var ctr, host [2]time.Duration
	b.ResetTimer()
	for range b.N {
		for i, sb := range []providers.Sandbox{fresh, pers} {
			c0, h0 := containerCPU(b, p, sb), processCPU()
			obs, err := sb.Act(b.Context(), a)
			if err != nil || obs.ExitCode != 0 {
				b.Fatalf("exec: %v %s", err, obs.Text())
			}
			ctr[i] += containerCPU(b, p, sb) - c0
			host[i] += processCPU() - h0
		}
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	b.ReportMetric(ms(ctr[0]), "fresh-ctr-cpu-ms/exec")
	b.ReportMetric(ms(ctr[1]), "persistent-ctr-cpu-ms/exec")
	b.ReportMetric(ms(host[0]), "fresh-host-cpu-ms/exec")
	b.ReportMetric(ms(host[1]), "persistent-host-cpu-ms/exec")
	if ctr[0] > 0 {
		b.ReportMetric(float64(ctr[1])/float64(ctr[0]), "ctr-cpu-ratio")
	}
}

// containerCPU is the CPU time the sandbox's container used so far.
func containerCPU(b *testing.B, p *Provider, sb providers.Sandbox) time.Duration {
	res, err := p.cli.ContainerStats(b.Context(), sb.Info().ID, client.ContainerStatsOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	var st struct {
		CPU struct {
			Usage struct {
				Total uint64 `json:"total_usage"`
			} `json:"cpu_usage"`
		} `json:"cpu_stats"`
	}
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		b.Fatal(err)
	}
	return time.Duration(st.CPU.Usage.Total)
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkExecGate measures the container CPU of one small exec with the
// wrapper's start gate (a FIFO: CMD's shell blocks reading it until the
// timer is ready) against its fallback (CMD's shell stops itself and the
// wrapper busy-waits on /proc until it has), alternating in one sandbox so
// both see the same load. Reported per exec, and the ratio gate/fallback.
func BenchmarkExecGate(b *testing.B) {
	engine(b)
	p, err := New(b.Context(), providers.Options{RunID: "bench-" + tagSafe(b.Name())})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	sb, err := p.Create(b.Context(), providers.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close(context.Background())
	if path, why := p.OutputPath(); path != OutputFIFO {
		b.Skipf("the gate needs the FIFO output path: %s", why)
	}
	a := runtime.Action{Kind: runtime.ActExec, Cmd: "true"}
	defer func() { noGate = false }()
	var ctr [2]time.Duration
	b.ResetTimer()
	for range b.N {
		for i, fallback := range []bool{false, true} {
			noGate = fallback
			c0 := containerCPU(b, p, sb)
			obs, err := sb.Act(b.Context(), a)
			if err != nil || obs.ExitCode != 0 {
				b.Fatalf("exec: %v %s", err, obs.Text())
			}
			ctr[i] += containerCPU(b, p, sb) - c0
		}
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	b.ReportMetric(ms(ctr[0]), "gate-ctr-cpu-ms/exec")
	b.ReportMetric(ms(ctr[1]), "fallback-ctr-cpu-ms/exec")
	if ctr[1] > 0 {
		b.ReportMetric(float64(ctr[0])/float64(ctr[1]), "gate/fallback")
	}
}
