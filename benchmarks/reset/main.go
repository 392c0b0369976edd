// Command reset measures what it costs the local provider to hand an episode
// a fresh copy of a task's golden state, three ways, in one run on one
// machine:
//
//   - fork (overlay): Fork from a checkpoint by an overlayfs mount, then Close;
//   - fork (copy): Fork by copying the checkpoint tree (reflink where the
//     filesystem can), then Close;
//   - recreate: Create an empty sandbox and run the task's setup command
//     again, then Close — what a provider without checkpoints must do.
//
// The golden workspace (about -mb MiB in -files files, 100 per directory) is
// made inside the sandbox by a setup command, a sh loop of
// "head -c SIZE /dev/urandom", so recreate runs exactly what the golden ran.
// Each method gets a synced disk before it starts; the copy provider's
// golden is the first recreate's sandbox, checkpointed outside the timing, so
// the slow setup runs one time fewer. It prints the
// median (p50) and p95 per method of the time until the sandbox is ready and
// of its Close, the ratios recreate/overlay and copy/overlay computed from the
// same run, and the machine it ran on; -json FILE writes the same as JSON.
//
//	go run ./benchmarks/reset                      # 100 MiB, 5000 files, 20 forks, 5 recreates
//	go run ./benchmarks/reset -mb 10 -files 500 -n 50 -json reset.json
//
// It needs the right to mount overlays (root, or a user namespace of its own);
// without it, it says why and exits with status 1.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/local"
	"github.com/forkline/forkline/runtime"
)

// config is what the flags set.
type config struct {
	MB        int    `json:"mb"`
	Files     int    `json:"files"`
	N         int    `json:"n"`
	NRecreate int    `json:"n_recreate"`
	Dir       string `json:"dir"`
	JSON      string `json:"-"`
}

// Machine describes where the numbers were taken.
type Machine struct {
	Date       string `json:"date"`
	Cores      int    `json:"cores"`
	CPU        string `json:"cpu"`
	MemoryMiB  int64  `json:"memory_mib"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	Dir        string `json:"dir"`
	Filesystem string `json:"filesystem"`
	// LoadAvg is /proc/loadavg's 1, 5 and 15 minute load when the run
	// started: other work on the machine skews the numbers.
	LoadAvg string `json:"load_avg"`
}

// Method holds the samples of one reset method, in milliseconds.
type Method struct {
	Name      string    `json:"name"`
	N         int       `json:"n"`
	ReadyP50  float64   `json:"ready_p50_ms"`
	ReadyP95  float64   `json:"ready_p95_ms"`
	CloseP50  float64   `json:"close_p50_ms"`
	CloseP95  float64   `json:"close_p95_ms"`
	TotalP50  float64   `json:"total_p50_ms"`
	TotalP95  float64   `json:"total_p95_ms"`
	ReadyMS   []float64 `json:"ready_ms"`
	CloseMS   []float64 `json:"close_ms"`
	readyDurs []time.Duration
	closeDurs []time.Duration
}

// Report is the whole result, as -json writes it.
type Report struct {
	Machine        Machine  `json:"machine"`
	Config         config   `json:"config"`
	WorkspaceFiles int      `json:"workspace_files"`
	WorkspaceBytes int64    `json:"workspace_bytes"`
	GoldenSetupMS  float64  `json:"golden_setup_ms"`
	CheckpointMS   float64  `json:"checkpoint_ms"`
	Methods        []Method `json:"methods"`
	// Ratios of p50s from this run: how many times slower than an overlay
	// fork each method is to get a ready sandbox, and ready + close.
	RecreateOverOverlay      float64 `json:"recreate_over_overlay_ready_p50"`
	CopyOverOverlay          float64 `json:"copy_over_overlay_ready_p50"`
	RecreateOverOverlayTotal float64 `json:"recreate_over_overlay_total_p50"`
	CopyOverOverlayTotal     float64 `json:"copy_over_overlay_total_p50"`
}

func main() {
	var c config
	flag.IntVar(&c.MB, "mb", 100, "size of the golden workspace in MiB")
	flag.IntVar(&c.Files, "files", 5000, "number of files in the golden workspace")
	flag.IntVar(&c.N, "n", 20, "iterations of each fork method")
	flag.IntVar(&c.NRecreate, "n-recreate", 5, "iterations of recreate (slow: it reruns the setup)")
	flag.StringVar(&c.Dir, "dir", os.TempDir(), "directory the providers keep their state in")
	flag.StringVar(&c.JSON, "json", "", "also write the results as JSON to this file")
	flag.Parse()
	if c.MB <= 0 || c.Files <= 0 || c.N <= 0 || c.NRecreate <= 0 {
		fmt.Fprintln(os.Stderr, "reset: -mb, -files, -n and -n-recreate must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "reset:", err)
		if ctx.Err() != nil {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

// setupCommand makes files files of size bytes each under d0, d1, ... (100
// files per directory) from /dev/urandom.
func setupCommand(files int, size int64) string {
	return fmt.Sprintf(`set -e
i=0
while [ $i -lt %d ]; do
  d=d$((i / 100))
  [ -d $d ] || mkdir $d
  head -c %d /dev/urandom > $d/f$i
  i=$((i + 1))
done`, files, size)
}

func run(ctx context.Context, c config, out io.Writer) (err error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	rep := Report{Config: c, Machine: machine(c.Dir)}
	fileSize := int64(c.MB) << 20 / int64(c.Files)
	rep.WorkspaceFiles, rep.WorkspaceBytes = c.Files, fileSize*int64(c.Files)
	setup := setupCommand(c.Files, fileSize)

	open := func(fork string) (*local.Provider, error) {
		return local.New(providers.Options{Dir: c.Dir, RunID: "benchmarks/reset",
			Params: map[string]string{local.ParamFork: fork}})
	}
	overlay, err := open(local.ForkOverlay)
	if err != nil {
		return fmt.Errorf("this benchmark compares against overlay forks: %w", err)
	}
	defer func() { err = errors.Join(err, overlay.Close(context.Background())) }()
	copying, err := open(local.ForkCopy)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, copying.Close(context.Background())) }()

	fmt.Fprintf(out, "forkline reset benchmark, %s\n", rep.Machine.Date)
	m := rep.Machine
	fmt.Fprintf(out, "machine: %d cores (%s), %d MiB RAM, Linux %s, %s; state in %s (%s); load average %s\n",
		m.Cores, m.CPU, m.MemoryMiB, m.Kernel, m.Go, m.Dir, m.Filesystem, m.LoadAvg)
	fmt.Fprintf(out, "workspace: %d files of %d bytes (%.1f MiB), made by a sh loop of head -c %d /dev/urandom\n",
		c.Files, fileSize, float64(rep.WorkspaceBytes)/(1<<20), fileSize)

	// A checkpoint belongs to the provider that made it, so each provider
	// needs its own golden. The overlay provider's is made here; the copy
	// provider's is the first recreate, checkpointed outside the timing, which
	// spares the run one more setup.
	began := time.Now()
	sb, err := overlay.Create(ctx, providers.Spec{})
	if err != nil {
		return err
	}
	if err := mustRun(ctx, sb, setup); err != nil {
		return fmt.Errorf("golden setup: %w", err)
	}
	setupTook := time.Since(began)
	overlayCP, err := checkpointGolden(ctx, overlay, sb, rep.WorkspaceBytes)
	if err != nil {
		return err
	}
	if err := sb.Close(ctx); err != nil {
		return err
	}
	rep.GoldenSetupMS, rep.CheckpointMS = ms(setupTook), ms(overlayCP.Took)
	fmt.Fprintf(out, "golden: setup %s, checkpoint (copy of the workspace + syncfs) %s\n\n",
		round(setupTook), round(overlayCP.Took))

	var copyCP providers.Checkpoint
	overlayFork := func() (providers.Sandbox, error) { return overlay.Fork(ctx, overlayCP) }
	copyFork := func() (providers.Sandbox, error) { return copying.Fork(ctx, copyCP) }
	recreate := func() (providers.Sandbox, error) {
		sb, err := copying.Create(ctx, providers.Spec{})
		if err != nil {
			return nil, err
		}
		if err := mustRun(ctx, sb, setup); err != nil {
			_ = sb.Close(ctx)
			return nil, err
		}
		return sb, nil
	}
	makeCopyGolden := func(i int, sb providers.Sandbox) (err error) {
		if i == 0 {
			copyCP, err = checkpointGolden(ctx, copying, sb, rep.WorkspaceBytes)
		}
		return err
	}
	plan := []struct {
		name  string
		n     int
		make  func() (providers.Sandbox, error)
		after func(int, providers.Sandbox) error
	}{
		{"fork (overlay)", c.N, overlayFork, nil},
		{"recreate", c.NRecreate, recreate, makeCopyGolden},
		{"fork (copy)", c.N, copyFork, nil},
	}
	byName := map[string]Method{}
	for _, step := range plan {
		fmt.Fprintf(out, "measuring %s x%d ...\n", step.name, step.n)
		meth, err := measure(ctx, step.name, step.n, c.Files, step.make, step.after)
		if err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
		byName[step.name] = meth
	}
	rep.Methods = []Method{byName["fork (overlay)"], byName["fork (copy)"], byName["recreate"]}
	ov, cp, re := rep.Methods[0], rep.Methods[1], rep.Methods[2]
	rep.RecreateOverOverlay, rep.CopyOverOverlay = re.ReadyP50/ov.ReadyP50, cp.ReadyP50/ov.ReadyP50
	rep.RecreateOverOverlayTotal, rep.CopyOverOverlayTotal = re.TotalP50/ov.TotalP50, cp.TotalP50/ov.TotalP50
	printReport(out, rep)
	if c.JSON != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.JSON, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// checkpointGolden checkpoints sb into p and checks its size.
func checkpointGolden(ctx context.Context, p *local.Provider, sb providers.Sandbox, want int64) (providers.Checkpoint, error) {
	cp, err := p.Checkpoint(ctx, sb, "reset-benchmark")
	if err != nil {
		return cp, err
	}
	if cp.Bytes != want {
		return cp, fmt.Errorf("the golden holds %d bytes, want %d", cp.Bytes, want)
	}
	return cp, nil
}

// measure runs n iterations of newSandbox + Close on a synced disk. The first
// sandbox is checked to hold the whole workspace, and after (when set) is
// called with each sandbox, both outside the timing.
func measure(ctx context.Context, name string, n, files int, newSandbox func() (providers.Sandbox, error),
	after func(int, providers.Sandbox) error) (Method, error) {
	unix.Sync() // the previous method's writeback must not land on this one
	meth := Method{Name: name, N: n}
	for i := range n {
		began := time.Now()
		sb, err := newSandbox()
		if err != nil {
			return meth, err
		}
		ready := time.Since(began)
		if i == 0 {
			if err := checkWorkspace(ctx, sb, files); err != nil {
				_ = sb.Close(ctx)
				return meth, err
			}
		}
		if after != nil {
			if err := after(i, sb); err != nil {
				_ = sb.Close(ctx)
				return meth, err
			}
		}
		began = time.Now()
		if err := sb.Close(ctx); err != nil {
			return meth, err
		}
		meth.readyDurs = append(meth.readyDurs, ready)
		meth.closeDurs = append(meth.closeDurs, time.Since(began))
	}
	total := make([]time.Duration, n)
	for i := range n {
		total[i] = meth.readyDurs[i] + meth.closeDurs[i]
		meth.ReadyMS = append(meth.ReadyMS, ms(meth.readyDurs[i]))
		meth.CloseMS = append(meth.CloseMS, ms(meth.closeDurs[i]))
	}
	meth.ReadyP50, meth.ReadyP95 = ms(percentile(meth.readyDurs, 50)), ms(percentile(meth.readyDurs, 95))
	meth.CloseP50, meth.CloseP95 = ms(percentile(meth.closeDurs, 50)), ms(percentile(meth.closeDurs, 95))
	meth.TotalP50, meth.TotalP95 = ms(percentile(total, 50)), ms(percentile(total, 95))
	return meth, nil
}

// checkWorkspace makes sure sb really holds the golden files.
func checkWorkspace(ctx context.Context, sb providers.Sandbox, files int) error {
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "find . -type f | wc -l"})
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(obs.Text()); got != strconv.Itoa(files) {
		return fmt.Errorf("the sandbox holds %s files, want %d", got, files)
	}
	return nil
}

func mustRun(ctx context.Context, sb providers.Sandbox, cmd string) error {
	obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: cmd, TimeoutMS: 30 * 60 * 1000})
	if err != nil {
		return err
	}
	if obs.Error {
		return fmt.Errorf("exit %d (%s): %s", obs.ExitCode, obs.ErrorKind, obs.Text())
	}
	return nil
}

// percentile is the nearest-rank percentile of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	return s[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func round(d time.Duration) time.Duration {
	switch {
	case d > 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d > time.Second:
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}

func fmtMS(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2f s", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f ms", v)
}

func printReport(out io.Writer, rep Report) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "method\tn\tready p50\tready p95\tclose p50\tclose p95\tready+close p50\t")
	for _, m := range rep.Methods {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", m.Name, m.N,
			fmtMS(m.ReadyP50), fmtMS(m.ReadyP95), fmtMS(m.CloseP50), fmtMS(m.CloseP95), fmtMS(m.TotalP50))
	}
	tw.Flush()
	fmt.Fprintln(out)
	fmt.Fprintf(out, "ratios of p50s, this run: recreate/overlay-fork = %.0fx, copy/overlay-fork = %.0fx (ready)\n",
		rep.RecreateOverOverlay, rep.CopyOverOverlay)
	fmt.Fprintf(out, "                          recreate/overlay-fork = %.0fx, copy/overlay-fork = %.0fx (ready + close)\n",
		rep.RecreateOverOverlayTotal, rep.CopyOverOverlayTotal)
	ov := rep.Methods[0]
	fmt.Fprintf(out, "targets: overlay fork p50 < 5 ms: %s (%s); overlay fork >= 50x faster than recreate: %s (%.0fx)\n",
		yes(ov.ReadyP50 < 5), fmtMS(ov.ReadyP50), yes(rep.RecreateOverOverlay >= 50), rep.RecreateOverOverlay)
	fmt.Fprintf(out, "notes: ready = until Fork/Create+setup returns; close = Close (unmount or delete). "+
		"Recreate ran %d times (-n-recreate), the forks %d times (-n); p95 is nearest-rank, so with few samples it is the maximum. "+
		"The disk is synced before each method. The copy provider's golden is the first recreate's sandbox, "+
		"checkpointed outside the timing.\n", rep.Config.NRecreate, rep.Config.N)
}

func yes(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// machine describes this host.
func machine(dir string) Machine {
	m := Machine{
		Date:  time.Now().UTC().Format(time.RFC3339),
		Cores: goruntime.NumCPU(),
		Go:    goruntime.Version(),
		Dir:   dir,
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	m.CPU = procField("/proc/cpuinfo", "model name")
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if kb, err := strconv.ParseInt(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 10, 64); err == nil {
		m.MemoryMiB = kb >> 10
	}
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil {
		m.Filesystem = fsName(st.Type)
	}
	return m
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func fsName(magic int64) string {
	switch magic {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	}
	return fmt.Sprintf("0x%x", magic)
}
