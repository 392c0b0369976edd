// Command compose benchmarks the reset of a multi-container (compose) task
// on forkline's docker provider against what a harness that does not fork
// pays per episode: starting the whole compose project again.
//
//   - up: a fresh environment per episode, as `docker compose up --wait`
//     gives one: a network, every service from its image in depends_on
//     order until its healthcheck passes, the agent's container
//     (Provider.Create of the task's Spec, images already on the engine);
//   - fork: Provider.Fork of the golden checkpoint: a network of the
//     fork's own, every service from its committed image until healthy,
//     the agent's container.
//
// kv loads -seed-rows rows into its files on its first start (as a
// database's entrypoint initialises an empty data directory and loads a
// dump); a fork finds them in its committed files. -seed-rows 0 measures
// the bare starts.
//
// Both are timed until the agent's container has read the kv service's
// counter (bash's /dev/tcp), so a reset counts only once the environment
// answers. They alternate, so load on the machine falls on both alike, and
// the ratio fork/up is of one run; the load average before and after is
// printed with it. -md writes benchmarks/compose/RESULTS.md.
//
//	go run ./benchmarks/compose -n 10 -md benchmarks/compose/RESULTS.md
//
// It needs a Docker engine with forkline/busybox and forkline/debian.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"sort"
	"strings"
	"time"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/docker"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/task"
)

func main() {
	n := flag.Int("n", 10, "resets of each kind")
	dir := flag.String("task", "task/testdata/harbor-compose/kv-counter", "a Harbor compose task folder")
	md := flag.String("md", "", "write a Markdown report here")
	rows := flag.Int("seed-rows", 100000, "rows the kv service writes into its files on its first start, as a database's first start initialises and loads its data (0: none)")
	flag.Parse()
	if err := run(*n, *dir, *md, *rows); err != nil {
		fmt.Fprintln(os.Stderr, "compose:", err)
		os.Exit(1)
	}
}

func run(n int, dir, md string, rows int) error {
	ctx := context.Background()
	specs, err := task.Load(dir)
	if err != nil {
		return err
	}
	s := specs[0]
	services, err := episode.Services(s.Compose)
	if err != nil {
		return err
	}
	if rows > 0 {
		// The first start of the service loads its data; a start that finds
		// it (a fork's, from the committed files) does not, as a database's
		// entrypoint initialises only an empty data directory.
		for i := range services {
			if services[i].Name == "kv" {
				seed := fmt.Sprintf("[ -f /data/table ] || awk 'BEGIN { for (i = 0; i < %d; i++) print i, i * i, \"row\" i }' > /data/table\n", rows)
				services[i].Command = append([]string(nil), services[i].Command...)
				last := len(services[i].Command) - 1
				services[i].Command[last] = "mkdir -p /data\n" + seed + services[i].Command[last]
			}
		}
	}
	var env []string
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	spec := providers.Spec{Image: s.Image, Env: env, Services: services, Labels: map[string]string{"forkline.bench": "compose"}}
	p, err := docker.New(ctx, providers.Options{RunID: fmt.Sprintf("bench-compose-%d", os.Getpid())})
	if err != nil {
		return err
	}
	defer p.Close(context.Background())
	load0 := loadAverage()
	golden, err := p.Create(ctx, spec)
	if err != nil {
		return err
	}
	if err := answer(ctx, golden); err != nil {
		return err
	}
	cp, err := p.Checkpoint(ctx, golden, "golden")
	if err != nil {
		return err
	}
	_ = golden.Close(ctx)
	var ups, forks []time.Duration
	for i := 0; i < n; i++ {
		for _, kind := range []string{"up", "fork"} {
			began := time.Now()
			var sb providers.Sandbox
			if kind == "up" {
				sb, err = p.Create(ctx, spec)
			} else {
				sb, err = p.Fork(ctx, cp)
			}
			if err == nil {
				err = answer(ctx, sb)
			}
			took := time.Since(began)
			if sb != nil {
				_ = sb.Close(ctx)
			}
			if err != nil {
				return fmt.Errorf("%s %d: %w", kind, i, err)
			}
			if kind == "up" {
				ups = append(ups, took)
			} else {
				forks = append(forks, took)
			}
		}
	}
	load1 := loadAverage()
	up50, up95 := pct(ups, 50), pct(ups, 95)
	f50, f95 := pct(forks, 50), pct(forks, 95)
	var b strings.Builder
	fmt.Fprintf(&b, "services %s, agent image %s, n=%d each; kv loads %d rows on its first start\n", strings.Join(s.Compose.ServiceNames(), ", "), s.Image, n, rows)
	fmt.Fprintf(&b, "up   (compose up per episode) p50 %8.1f ms  p95 %8.1f ms\n", ms(up50), ms(up95))
	fmt.Fprintf(&b, "fork (of the golden)          p50 %8.1f ms  p95 %8.1f ms  ×%.2f of up\n", ms(f50), ms(f95), ms(f50)/ms(up50))
	fmt.Fprintf(&b, "load average %s before, %s after\n", load0, load1)
	fmt.Print(b.String())
	if md == "" {
		return nil
	}
	kernel, _ := exec.Command("uname", "-r").Output()
	var r strings.Builder
	fmt.Fprintf(&r, "# Compose task reset: a fork against compose up per episode\n\n")
	fmt.Fprintf(&r, "Command: `go run ./benchmarks/compose %s`  \n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&r, "Date: %s  \n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&r, "Machine: %s/%s, kernel %s, %d CPUs; %s  \n\n", goruntime.GOOS, goruntime.GOARCH, strings.TrimSpace(string(kernel)), goruntime.NumCPU(), goruntime.Version())
	fmt.Fprintf(&r, "```\n%s```\n", b.String())
	return os.WriteFile(md, []byte(r.String()), 0o644)
}

// answer reads the kv service's counter from the agent's container.
func answer(ctx context.Context, sb providers.Sandbox) error {
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: `bash -c 'exec 3<>/dev/tcp/kv/7000; echo GET >&3; read -r n <&3; echo "$n"'`})
	if err != nil {
		return err
	}
	if obs.ExitCode != 0 || strings.TrimSpace(string(obs.Output)) == "" {
		return fmt.Errorf("kv did not answer: %q", obs.Output)
	}
	return nil
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
