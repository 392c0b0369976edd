package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Package names the Debian package that ships runsc, for the message of a
// host without it.
const Package = "runsc"

// ErrNoRunsc is wrapped by the error New returns when no runsc binary can be
// found (PATH, or the "runsc" param).
var ErrNoRunsc = errors.New("gvisor: runsc is not installed (on Debian: apt-get install " + Package + ")")

// runsc runs one runsc binary with this provider's state directory. Every
// invocation gets a process group of its own: a terminal's Ctrl-C reaches
// forkline, which then closes its sandboxes, and not the sandboxes or the
// runsc exec processes underneath an episode directly.
type runsc struct {
	path     string
	root     string // --root: the state directory of this provider's containers
	platform string
	version  string // "runsc version ..." first line, as the binary says it
	debugLog string // --debug-log directory (with a trailing /), "" for none
}

// base is the flags of every invocation: the state root, and the debug log
// when asked for.
func (r *runsc) base() []string {
	if r.debugLog == "" {
		return []string{"--root=" + r.root}
	}
	return []string{"--root=" + r.root, "--debug", "--debug-log=" + r.debugLog}
}

// findRunsc locates the binary: param when given (a path or a name on
// PATH), else "runsc" on PATH, also in /usr/sbin and /usr/bin, where
// Debian's package puts it even when PATH lacks them.
func findRunsc(param string) (string, error) {
	name := param
	if name == "" {
		name = "runsc"
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if param == "" {
		for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin"} {
			if st, err := os.Stat(dir + "/runsc"); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
				return dir + "/runsc", nil
			}
		}
		return "", ErrNoRunsc
	}
	return "", fmt.Errorf("%w: param %s=%q is not an executable", ErrNoRunsc, ParamRunsc, param)
}

// runscVersion asks the binary for its version: "runsc version 0.0~20221219.0".
func runscVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("gvisor: %s --version: %w: %s", path, err, lastLine(out))
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(first), nil
}

// global is the flags every invocation that makes or restores a sandbox
// needs: its state root, the platform, the network and the overlay that
// keeps the sandbox's file changes in its memory (so that a checkpoint
// image holds them), and --net-raw when the sandbox keeps NET_RAW: runsc
// strips that capability (no raw sockets) without it.
func (r *runsc) global(network string, netRaw bool) []string {
	g := append(r.base(), "--platform="+r.platform, "--network="+network, "--overlay2=root:memory")
	if netRaw {
		g = append(g, "--net-raw")
	}
	return g
}

// command makes an exec.Cmd for runsc with args, in a process group of its
// own, with no stdin.
func (r *runsc) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// simple runs a runsc subcommand that makes no sandbox (state, list, kill,
// delete, checkpoint) and returns its stdout; a failure names the
// subcommand and carries the end of what runsc said.
func (r *runsc) simple(ctx context.Context, args ...string) ([]byte, error) {
	cmd := r.command(ctx, append(r.base(), args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("gvisor: runsc %s: %w", args[0], ctx.Err())
		}
		return out.Bytes(), &runscError{sub: args[0], err: err, said: lastLine(errb.Bytes())}
	}
	return out.Bytes(), nil
}

// detached runs a runsc subcommand that leaves a sandbox behind (run
// --detach, restore --detach). The sandbox's processes inherit the stdio
// runsc was given, so runsc gets /dev/null and a log file, never a pipe a
// Wait would block on until the sandbox ends. It fails after limit with
// errBootTimeout, killing runsc (the caller deletes the container).
func (r *runsc) detached(ctx context.Context, logPath string, limit time.Duration, args ...string) error {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	defer devnull.Close()
	tctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := r.command(tctx, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, logf
	// The sandbox outlives this runsc process: it must not be in its group
	// (killed with it on a timeout) nor in forkline's (a terminal's
	// Ctrl-C): a session of its own.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	runErr := cmd.Run()
	if runErr == nil {
		return nil
	}
	said, _ := os.ReadFile(logPath)
	sub := "run"
	for _, a := range args {
		if a == "run" || a == "restore" {
			sub = a
			break
		}
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("gvisor: runsc %s: %w", sub, ctx.Err())
	case tctx.Err() != nil:
		return fmt.Errorf("%w after %s (platform %s)%s", errBootTimeout, limit, r.platform, sayIfAny(said))
	}
	return &runscError{sub: sub, err: runErr, said: lastLine(said)}
}

// errBootTimeout is wrapped when runsc did not start a sandbox in time.
var errBootTimeout = errors.New("gvisor: runsc did not start the sandbox")

func sayIfAny(b []byte) string {
	if l := lastLine(b); l != "" {
		return ": " + l
	}
	return ""
}

// runscError is a runsc subcommand that failed, with what it said last.
type runscError struct {
	sub  string
	err  error
	said string
}

func (e *runscError) Error() string {
	if e.said == "" {
		return fmt.Sprintf("gvisor: runsc %s: %v", e.sub, e.err)
	}
	return fmt.Sprintf("gvisor: runsc %s: %s (%v)", e.sub, e.said, e.err)
}

func (e *runscError) Unwrap() error { return e.err }

// lastLine is the last non-empty line of b, trimmed, at most 1 KiB.
func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	if len(s) > 1024 {
		s = s[:1024] + "…"
	}
	return s
}

// containerState is what runsc state says of a container: "running",
// "stopped", "created", "paused", or "" with an error when runsc does not
// know it (deleted, or the sandbox's state is gone).
func (r *runsc) containerState(ctx context.Context, id string) (string, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	out, err := r.simple(sctx, "state", id)
	if err != nil {
		return "", err
	}
	// The JSON's "status" field; a full decode is not needed.
	const key = `"status":`
	s := strings.ReplaceAll(string(out), " ", "")
	i := strings.Index(s, key)
	if i < 0 {
		return "", fmt.Errorf("gvisor: runsc state %s: no status in %q", id, lastLine(out))
	}
	v := s[i+len(key):]
	v = strings.TrimPrefix(v, `"`)
	if j := strings.IndexByte(v, '"'); j >= 0 {
		v = v[:j]
	}
	return v, nil
}

// list returns the ids of the containers in the state root.
func (r *runsc) list(ctx context.Context) ([]string, error) {
	if _, err := os.Stat(r.root); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	out, err := r.simple(ctx, "list", "--quiet")
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ids = append(ids, l)
		}
	}
	return ids, nil
}

// deleteContainer removes a container, killing its sandbox first when it
// runs; a container runsc does not know is already gone.
func (r *runsc) deleteContainer(ctx context.Context, id string) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	_, err := r.simple(dctx, "delete", "--force", id)
	if err != nil && r.gone(dctx, id) {
		return nil
	}
	return err
}

// gone reports whether runsc no longer knows container id.
func (r *runsc) gone(ctx context.Context, id string) bool {
	_, err := r.simple(ctx, "state", id)
	var re *runscError
	return errors.As(err, &re) && strings.Contains(re.said, "does not exist")
}
