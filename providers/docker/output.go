package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A command's output does not have to cross the engine. Through the exec
// stream (the process's pipe, containerd's shim, a FIFO, dockerd, the
// multiplexed HTTP stream) every byte costs about ten times the CPU of a
// local pipe, so a chatty command drains at 50 to 150 MB/s where a local
// pipe does gigabytes per second, and a command printing 200 MB could hit
// its timeout only because the engine could not keep up; most of those
// bytes are then thrown away by the output cap anyway.
//
// When the engine runs on this host, each sandbox gets a host directory
// bind-mounted read-only at OutputDir, and each exec a FIFO in it that the
// provider holds open for reading: the command's stdout and stderr go into
// the FIFO, straight into the provider's output cap buffer, at the speed of
// a local pipe. The exec stream still carries the wrapper's reports and
// everything else. The container can open a FIFO for writing (FIFOs stay
// writable on a read-only mount) but cannot create or change anything in
// the directory; each sandbox sees its own directory only. FIFO names are
// random and the directories mode 0711, so no other host user can find one.
//
// Whether it works is found out once per provider, on the first sandbox: a
// probe exec writes a token into a FIFO without ever blocking (it opens the
// FIFO read-write) and the provider checks that the token arrived. A remote
// engine (the bind source is not on its host), one in a VM (the FIFO is not
// the same across the VM boundary), SELinux denials or user-namespace
// remapping all fail the probe, and the provider then uses the exec stream,
// as it always did. The "output" param forces either way.

// OutputDir is where a sandbox sees its output directory, when it has one.
const OutputDir = "/.forkline"

// ParamOutput is "auto" (default: FIFOs when the probe succeeds), "fifo"
// (Create fails when they cannot work) or "stream" (always the exec stream).
const ParamOutput = "output"

// The values of ParamOutput.
const (
	OutputAuto   = "auto"
	OutputFIFO   = "fifo"
	OutputStream = "stream"
)

// outputDirPrefix names the provider's host directory, so a sweep finds the
// ones crashed processes left.
const outputDirPrefix = "forkline-docker-"

// pipeGrace is how long an exec waits, after its wrapper exited, for
// background jobs to close the output FIFO before it stops reading (their
// next write then fails), as the local provider does.
const pipeGrace = 500 * time.Millisecond

// fifoProbeToken is what the probe writes.
const fifoProbeToken = "forkline-fifo-ok"

// The states of the FIFO path.
const (
	fifoUnknown = iota
	fifoWorks
	fifoBroken
)

// outputFIFOs is a provider's FIFO output path.
type outputFIFOs struct {
	mode string // ParamOutput's value
	base string // where the provider's directory goes (Options.Dir or os.TempDir())

	mu    sync.Mutex
	dir   string // the provider's directory, made on first use
	state int
	why   string // why the FIFO path is not used, when broken
	seq   int
}

func newOutputFIFOs(mode, base string) (*outputFIFOs, error) {
	switch mode {
	case "":
		mode = OutputAuto
	case OutputAuto, OutputFIFO, OutputStream:
	default:
		return nil, fmt.Errorf("docker: param %s=%q (known: %s, %s, %s)", ParamOutput, mode, OutputAuto, OutputFIFO, OutputStream)
	}
	if base == "" {
		base = os.TempDir()
	}
	o := &outputFIFOs{mode: mode, base: base}
	if mode == OutputStream {
		o.state, o.why = fifoBroken, "the output param is stream"
	}
	return o, nil
}

// path says how command output travels: "fifo", "stream", or "unknown"
// before the first sandbox, and why not fifo.
func (o *outputFIFOs) path() (string, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch o.state {
	case fifoWorks:
		return OutputFIFO, ""
	case fifoBroken:
		return OutputStream, o.why
	}
	return "unknown", "no sandbox yet"
}

// newDir makes the host directory for one more container, or returns ""
// when the FIFO path is off.
func (o *outputFIFOs) newDir() (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.state == fifoBroken {
		return "", nil
	}
	if o.dir == "" {
		if err := os.MkdirAll(o.base, 0o755); err != nil {
			return "", o.failLocked(fmt.Errorf("making %s: %w", o.base, err))
		}
		dir, err := os.MkdirTemp(o.base, outputDirPrefix)
		if err == nil {
			err = writeOutputOwner(dir)
		}
		if err == nil {
			err = os.Chmod(dir, 0o711)
		}
		if err != nil {
			return "", o.failLocked(err)
		}
		o.dir = dir
	}
	o.seq++
	dir := filepath.Join(o.dir, strconv.Itoa(o.seq)+"-"+randomHex(4))
	if err := os.Mkdir(dir, 0o711); err != nil {
		return "", o.failLocked(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil { // against the umask
		return "", o.failLocked(err)
	}
	return dir, nil
}

// failLocked turns the FIFO path off (in auto mode) after err, and returns
// the error to report: nil in auto mode (the exec stream takes over), err
// itself when the param demands FIFOs.
func (o *outputFIFOs) failLocked(err error) error {
	if o.mode == OutputFIFO {
		return fmt.Errorf("docker: param %s=%s, but output FIFOs cannot work here: %w", ParamOutput, OutputFIFO, err)
	}
	o.state, o.why = fifoBroken, err.Error()
	return nil
}

// fail is failLocked for callers without the lock.
func (o *outputFIFOs) fail(err error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failLocked(err)
}

// usable reports whether execs in sb may use a FIFO.
func (o *outputFIFOs) usable(sb *sandbox) bool {
	if sb.outDir == "" {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.state == fifoWorks
}

// probe finds out, on the provider's first sandbox, whether FIFOs in its
// output directory reach this process; the others wait for the answer.
func (o *outputFIFOs) probe(ctx context.Context, sb *sandbox) error {
	if sb.outDir == "" {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.state != fifoUnknown {
		return nil
	}
	err := o.tryFIFO(ctx, sb)
	if err == nil {
		o.state = fifoWorks
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err() // decide on a later sandbox
	}
	return o.failLocked(err)
}

// tryFIFO runs the probe in sb: the container opens a FIFO read-write (which
// never blocks, connected or not) and writes the token; the token must be in
// the FIFO as this process sees it when the exec has ended.
func (o *outputFIFOs) tryFIFO(ctx context.Context, sb *sandbox) error {
	f, err := openFIFO(sb.outDir)
	if err != nil {
		return err
	}
	defer f.remove()
	var diag strings.Builder
	r, err := sb.run(ctx, []string{"sh", "-c", `exec 5<>"$1" && printf ` + fifoProbeToken + ` >&5`, "forkline-probe", f.inside},
		nil, &diag, &diag, time.Minute)
	if err != nil {
		return fmt.Errorf("the probe exec failed: %w", err)
	}
	if r.exitCode != 0 {
		return fmt.Errorf("the sandbox could not open its FIFO (exit %d: %s)", r.exitCode, strings.TrimSpace(diag.String()))
	}
	buf := make([]byte, len(fifoProbeToken))
	n, _ := syscall.Read(f.fd, buf) // non-blocking: what arrived is there
	if string(buf[:max(n, 0)]) != fifoProbeToken {
		return errors.New("a FIFO written in the sandbox does not reach this process (is the engine on another host or in a VM?)")
	}
	return nil
}

// close removes the provider's directory.
func (o *outputFIFOs) close() error {
	o.mu.Lock()
	dir := o.dir
	o.mu.Unlock()
	if dir == "" {
		return nil
	}
	return os.RemoveAll(dir)
}

// leftovers lists the sandbox output directories still on the host, and
// the provider's own directory too once the provider is closed.
func (o *outputFIFOs) leftovers(closed bool) []string {
	o.mu.Lock()
	dir := o.dir
	o.mu.Unlock()
	if dir == "" {
		return nil
	}
	var out []string
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, "directory "+filepath.Join(dir, e.Name()))
		}
	}
	if closed {
		out = append(out, "directory "+dir)
	}
	return out
}

// fifo is one exec's output FIFO, open for reading on the host.
type fifo struct {
	host, inside string // its path here and in the sandbox
	fd           int    // the non-blocking read end, for the probe
	r            *os.File
	hold         *os.File // a write end of our own until the exec ends, so the reader sees no EOF before the command has opened it
}

// openFIFO makes a FIFO with a random name in the sandbox's host directory
// dir and opens it for reading (and, to hold it, for writing).
func openFIFO(dir string) (*fifo, error) {
	name := randomHex(12)
	host := filepath.Join(dir, name)
	if err := unix.Mkfifo(host, 0o600); err != nil {
		return nil, fmt.Errorf("docker: output FIFO: %w", err)
	}
	// 0622: the sandbox's user may not be root; the name is the secret.
	if err := os.Chmod(host, 0o622); err != nil {
		_ = os.Remove(host)
		return nil, fmt.Errorf("docker: output FIFO: %w", err)
	}
	fd, err := unix.Open(host, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(host)
		return nil, fmt.Errorf("docker: output FIFO: %w", err)
	}
	hold, err := os.OpenFile(host, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		_ = unix.Close(fd)
		_ = os.Remove(host)
		return nil, fmt.Errorf("docker: output FIFO: %w", err)
	}
	return &fifo{host: host, inside: OutputDir + "/" + name, fd: fd, hold: hold}, nil
}

// gate is one exec's start gate (see execWrapper): a FIFO the sandbox's
// user may read and write, which the provider never opens.
type gate struct {
	host, inside string
}

// makeGate makes a gate FIFO with a random name in the sandbox's host
// directory dir.
func makeGate(dir string) (*gate, error) {
	name := randomHex(12)
	host := filepath.Join(dir, name)
	if err := unix.Mkfifo(host, 0o600); err != nil {
		return nil, fmt.Errorf("docker: exec gate: %w", err)
	}
	// 0666: the sandbox's user may not be root and must read it; the name
	// is the secret, as for the output FIFO.
	if err := os.Chmod(host, 0o666); err != nil {
		_ = os.Remove(host)
		return nil, fmt.Errorf("docker: exec gate: %w", err)
	}
	return &gate{host: host, inside: OutputDir + "/" + name}, nil
}

func (g *gate) remove() { _ = os.Remove(g.host) }

// drain copies the FIFO into w in the background until every writer closed
// it or finish stops it, and closes done then. It is called once.
func (f *fifo) drain(w io.Writer, done chan<- struct{}) {
	// os.NewFile on a non-blocking descriptor gives a pollable file: a read
	// waits in the runtime's poller and Close wakes it.
	f.r = os.NewFile(uintptr(f.fd), f.host)
	go func() {
		defer close(done)
		_, _ = io.Copy(w, f.r)
	}()
}

// finish is called when the exec has ended: it lets go of its own write end
// and waits up to pipeGrace for the reader to see the end of the output,
// then stops reading.
func (f *fifo) finish(done <-chan struct{}) {
	_ = f.hold.Close()
	select {
	case <-done:
	case <-time.After(pipeGrace):
	}
	f.remove()
	<-done
}

// remove closes both ends and removes the FIFO.
func (f *fifo) remove() {
	_ = f.hold.Close()
	if f.r != nil {
		_ = f.r.Close()
	} else {
		_ = unix.Close(f.fd)
	}
	_ = os.Remove(f.host)
}

// writeOutputOwner records the owning process in a provider's output
// directory, for sweepOutputDirs.
func writeOutputOwner(dir string) error {
	start, err := procStart(os.Getpid())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "owner"), []byte(fmt.Sprintf("%d %d\n", os.Getpid(), start)), 0o644)
}

// procStart is the start time of process pid in clock ticks since boot,
// which with the pid names a process even after its pid is reused.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// sweepOutputDirs removes, under base, the output directories of providers
// whose process is gone. A directory without a readable owner is left
// alone unless it is older than a minute (its owner may be writing it).
func sweepOutputDirs(base string) error {
	if base == "" {
		base = os.TempDir()
	}
	entries, err := os.ReadDir(base)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("docker: sweeping output directories: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), outputDirPrefix) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		if outputOwnerAlive(dir) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func outputOwnerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		st, serr := os.Stat(dir)
		return serr == nil && time.Since(st.ModTime()) < time.Minute
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscan(string(b), &pid, &start); err != nil {
		return false
	}
	now, err := procStart(pid)
	return err == nil && now == start
}
