// Package stopguard tells whether a stop signal a program got reached its
// children too. A batch system delivers its stop to every process of a job
// (Slurm's scancel, a kill of a process group), so the commands a local
// sandbox runs — the collector's children — may be killed by the stop
// itself, and their episodes would end with observations the agent never
// caused. The guard is a canary: a child of the program's own, in a process
// group of its own like a sandbox's commands, that does nothing but wait;
// its fate says whether the stop reached the children.
//
// It is the command's: signals belong to the program, not to the libraries
// (collect takes the guard as a hook, collect.Config.StopGuard). It knows
// the standard library only.
package stopguard

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Canary is the child whose fate says whether a stop reached the
// program's children too.
type Canary struct {
	cmd    *exec.Cmd
	gone   chan struct{} // closed when the canary has exited
	hit    bool          // it died of a signal the program did not send; read after gone
	diedAt time.Time     // when it was reaped; read after gone
}

// Start starts the canary; nil when the host has no sleep(1). A nil
// Canary is a guard too: never struck, and every stop is taken to reach
// the children (the safe side).
func Start() *Canary {
	path, err := exec.LookPath("sleep")
	if err != nil {
		return nil
	}
	c := &Canary{cmd: exec.Command(path, "2147483647"), gone: make(chan struct{})}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if c.cmd.Start() != nil {
		return nil
	}
	go func() {
		_ = c.cmd.Wait()
		if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() != syscall.SIGKILL {
			c.hit = true
		}
		c.diedAt = time.Now()
		close(c.gone)
	}()
	return c
}

// Wait is how long after the stop signal Reached waits for the canary's
// fate before it takes the stop to have reached the program alone: a signal sent to every process of a job arrives at once, and
// reaping the canary takes milliseconds.
const Wait = time.Second

// Reached reports whether the stop that came at since reached the
// program's children; it waits up to Wait after since for the
// canary to tell. A canary that died of a signal long before the stop (a
// `pkill sleep` on the host an hour ago) tells nothing about it.
func (c *Canary) Reached(since time.Time) bool {
	if c == nil {
		return true
	}
	select {
	case <-c.gone:
	case <-time.After(time.Until(since.Add(Wait))):
		select {
		case <-c.gone:
		default:
			return false
		}
	}
	return c.hit && c.diedAt.After(since.Add(-Wait))
}

// Struck reports, without waiting, whether something is happening to the
// canary: it died of a signal, or, read from /proc, a signal is pending on
// it or it is no longer asleep (dying, a zombie not yet reaped). It is a
// hint that a stop is under way, not a verdict: the verdict is Reached's,
// once the program has its own signal.
//
// A canary that died long ago (a `pkill sleep` on the host) is not struck:
// otherwise every later episode would wait Wait for a signal that
// never comes. The guard is blind from then on: a later stop is taken
// to reach the program alone (Reached).
func (c *Canary) Struck() bool {
	if c == nil {
		return false
	}
	recent := func() bool { return c.hit && time.Since(c.diedAt) < Wait }
	select {
	case <-c.gone:
		return recent()
	default:
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(c.cmd.Process.Pid) + "/status")
	if err != nil {
		// Gone from /proc: it has exited and is being reaped (or /proc
		// cannot be read, and nothing is known).
		select {
		case <-c.gone:
			return recent()
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}
	for line := range strings.Lines(string(status)) {
		key, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		value = strings.TrimSpace(value)
		switch key {
		case "State":
			if !strings.HasPrefix(value, "S") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if strings.Trim(value, "0") != "" {
				return true
			}
		}
	}
	return false
}

// Close ends the canary (SIGKILL: not a hit).
func (c *Canary) Close() {
	if c == nil {
		return
	}
	_ = c.cmd.Process.Kill()
	<-c.gone
}
