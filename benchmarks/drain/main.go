// Command drain measures how fast a command's output drains out of a
// sandbox, local and docker in one run: each sample is one exec, from Act
// to its observation, of a command printing -bytes bytes (200 MB by
// default), which the output cap then trims to its default 1 MiB, as in a
// real episode. For docker it measures both output paths: the FIFO in the
// sandbox's output directory (the default on a local engine) and the exec
// stream through the engine (what remote engines get, and what every
// engine got before the FIFO). Each command also runs with its output to
// /dev/null inside the docker sandbox, which is how fast the command
// itself is there: no drain can beat it.
//
//	go run ./benchmarks/drain -n 5 -md benchmarks/drain/RESULTS.md
//
// It needs a Docker engine and forkline/busybox (forkline images). The docker sandbox gets 2 CPUs here, so
// that its default limit of one does not cap the command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	goruntime "runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/docker"
	"github.com/forkline/forkline/providers/local"
	"github.com/forkline/forkline/runtime"
)

type config struct {
	N      int
	Bytes  int64
	MDPath string
}

// command is one output producer, written so that it prints exactly the
// asked number of bytes. bb is put before each tool: "busybox " runs the
// local sandbox's commands with the very busybox binary forkline/busybox is
// built from, so both sides run the same code and only the drain differs.
type command struct {
	Name string
	Cmd  func(bb string, n int64) string
}

var commands = []command{
	{"dd, 64 KiB writes", func(bb string, n int64) string {
		cmd := fmt.Sprintf("%sdd if=/dev/zero bs=65536 count=%d", bb, n/65536)
		if r := n % 65536; r > 0 {
			cmd += fmt.Sprintf("; %sdd if=/dev/zero bs=%d count=1", bb, r)
		}
		return "{ " + cmd + "; } 2>/dev/null"
	}},
	{"head -c from /dev/zero", func(bb string, n int64) string { return fmt.Sprintf("%shead -c %d /dev/zero", bb, n) }},
	{"yes, through head -c", func(bb string, n int64) string { return fmt.Sprintf("%syes | %shead -c %d", bb, bb, n) }},
}

// row is one line of the report.
type row struct {
	Command, Path string
	MBps          float64 // bytes over the median time
	Ratio         float64 // the median time over the local pipe's, same command
	Samples       []time.Duration
}

func main() {
	var cfg config
	flag.IntVar(&cfg.N, "n", 5, "samples per measure (the median is reported)")
	flag.Int64Var(&cfg.Bytes, "bytes", 200_000_000, "bytes each command prints")
	flag.StringVar(&cfg.MDPath, "md", "", "also write a Markdown report to `FILE`")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "drain:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	if cfg.N < 1 || cfg.Bytes < 1 {
		return errors.New("-n and -bytes must be at least 1")
	}
	load0 := loadAverage()
	lp, err := local.New(providers.Options{})
	if err != nil {
		return err
	}
	defer lp.Close(context.Background())
	cli, err := docker.Connect(ctx)
	if err != nil {
		return err
	}
	if _, err := docker.EnsureImages(ctx, cli, docker.ImageBusybox); err != nil {
		return err
	}
	engineVersion := ""
	if v, err := cli.ServerVersion(ctx, client.ServerVersionOptions{}); err == nil {
		engineVersion = v.Version + " (API " + v.APIVersion + ")"
	}
	cli.Close()
	open := func(output string) (*docker.Provider, providers.Sandbox, error) {
		p, err := docker.New(ctx, providers.Options{RunID: fmt.Sprintf("bench-drain-%d", os.Getpid()),
			Params: map[string]string{docker.ParamOutput: output}})
		if err != nil {
			return nil, nil, err
		}
		sb, err := p.Create(ctx, providers.Spec{Resources: providers.Resources{CPUs: 2}})
		if err != nil {
			p.Close(context.Background())
			return nil, nil, err
		}
		return p, sb, nil
	}
	fp, fsb, err := open(docker.OutputFIFO)
	if err != nil {
		return err
	}
	defer fp.Close(context.Background())
	sp, ssb, err := open(docker.OutputStream)
	if err != nil {
		return err
	}
	defer sp.Close(context.Background())
	lsb, err := lp.Create(ctx, providers.Spec{})
	if err != nil {
		return err
	}

	bb := ""
	if _, err := os.Stat(docker.BusyboxPath); err == nil {
		bb = docker.BusyboxPath + " "
	}
	var rows []row
	for _, c := range commands {
		cmd := c.Cmd("", cfg.Bytes)
		targets := []struct {
			path string
			sb   providers.Sandbox
			cmd  string
			want int64
		}{
			{"local pipe", lsb, c.Cmd(bb, cfg.Bytes), cfg.Bytes},
			{"docker, output FIFO", fsb, cmd, cfg.Bytes},
			{"docker, exec stream", ssb, cmd, cfg.Bytes},
			{"docker, the command alone (> /dev/null)", fsb, cmd + " >/dev/null", 0},
		}
		// Interleave the samples, so that a busy moment of the machine
		// hits every path alike.
		samples := make([][]time.Duration, len(targets))
		for i := 0; i < cfg.N; i++ {
			for j, tg := range targets {
				d, err := sample(ctx, tg.sb, tg.cmd, tg.want)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", c.Name, tg.path, err)
				}
				samples[j] = append(samples[j], d)
			}
		}
		localMed := median(samples[0])
		for j, tg := range targets {
			m := median(samples[j])
			rows = append(rows, row{Command: c.Name, Path: tg.path, MBps: float64(cfg.Bytes) / m.Seconds() / 1e6,
				Ratio: m.Seconds() / localMed.Seconds(), Samples: samples[j]})
		}
	}
	fpath, _ := fp.OutputPath()
	spath, _ := sp.OutputPath()
	if fpath != docker.OutputFIFO || spath != docker.OutputStream {
		return fmt.Errorf("the docker providers used %s and %s, not fifo and stream", fpath, spath)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# Output drain: local pipe and docker\n\n")
	fmt.Fprintf(&b, "Command: `go run ./benchmarks/drain -n %d -bytes %d`  \n", cfg.N, cfg.Bytes)
	fmt.Fprintf(&b, "Date: %s  \n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Machine: %s, %d CPUs; Docker Engine %s; %s  \n", kernel(), goruntime.NumCPU(), engineVersion, goruntime.Version())
	fmt.Fprintf(&b, "Load average (1 min): %s at the start, %s at the end\n\n", load0, loadAverage())
	fmt.Fprintf(&b, "Each sample is one exec printing %d bytes (kept: the default 1 MiB cap), median of %d; the paths' samples are interleaved.\n", cfg.Bytes, cfg.N)
	fmt.Fprintf(&b, "\"time / local\" is the median time of the row over that of the local pipe for the same command.\n\n")
	fmt.Fprintf(&b, "| command | path | MB/s (median) | time / local | samples (s) |\n|---|---|---:|---:|---|\n")
	for _, r := range rows {
		var ss []string
		for _, d := range r.Samples {
			ss = append(ss, fmt.Sprintf("%.3f", d.Seconds()))
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.2f | %s |\n", strings.ReplaceAll(r.Command, "|", `\|`), r.Path, r.MBps, r.Ratio, strings.Join(ss, " "))
	}
	localTools := "the host's tools"
	if bb != "" {
		localTools = "the host's " + docker.BusyboxPath + ", the binary forkline/busybox is built from, so both sides run the same code"
	}
	fmt.Fprintf(&b, "\nThe local sandbox runs %s; the docker sandbox runs forkline/busybox (limited to 2 CPUs here).\n"+
		"Where \"the command alone\" is slow (busybox head and yes write through stdio), no output path can be faster than it.\n", localTools)
	fmt.Print(b.String())
	if cfg.MDPath != "" {
		return os.WriteFile(cfg.MDPath, []byte(b.String()), 0o644)
	}
	return nil
}

// sample runs cmd once in sb and returns how long the exec took, checking
// that the command printed want bytes.
func sample(ctx context.Context, sb providers.Sandbox, cmd string, want int64) (time.Duration, error) {
	began := time.Now()
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: cmd, TimeoutMS: 600_000})
	took := time.Since(began)
	if err != nil {
		return 0, err
	}
	if obs.Error || obs.OutputBytes != want {
		return 0, fmt.Errorf("exit %d, %d bytes, want %d: %.200s", obs.ExitCode, obs.OutputBytes, want, obs.Text())
	}
	return took, nil
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	name := "Linux"
	if rel, err := readOSRelease(); err == nil {
		name = rel
	}
	return fmt.Sprintf("%s, kernel %s", name, strings.TrimSpace(string(b)))
}

func readOSRelease() (string, error) {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`), nil
		}
	}
	return "", errors.New("no PRETTY_NAME")
}
