package local

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// execMarker names the environment variable that marks every process an
// exec starts, as
//
//	FORKLINE_EXEC=forkline-local-XXXX/sb-ID/N
//
// (provider directory, sandbox, exec number). Descendants inherit it, also
// those that leave the exec's process group with setsid or a double fork, so
// a timeout, Close and Sweep can find them by reading /proc/PID/environ where
// killing the process group would miss them. A process that replaces its
// environment (env -i, sudo) drops the mark and is not found: the local
// provider is not a security boundary (see the package comment).
const execMarker = "FORKLINE_EXEC"

// killMarked sends SIGKILL to every process (of any group) whose environment
// holds execMarker with the value want, or, with prefix, a value starting
// with want. It scans again until a scan finds nobody, so a process forked
// during a scan is caught by the next one; it gives up after a few rounds
// rather than chase a fork bomb forever.
func killMarked(want string, prefix bool) {
	for range 8 {
		pids := markedProcesses(want, prefix)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// markedProcesses lists the live processes marked with want (see
// killMarked). Processes whose environment cannot be read (another user's)
// are skipped; zombies have an empty environment and are never listed.
func markedProcesses(want string, prefix bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	needle := []byte(execMarker + "=" + want)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		if marked(env, needle, prefix) {
			out = append(out, pid)
		}
	}
	return out
}

// marked reports whether the NUL-separated environment env has an entry
// equal to needle, or starting with it when prefix is set.
func marked(env, needle []byte, prefix bool) bool {
	for len(env) > 0 {
		entry := env
		if i := bytes.IndexByte(env, 0); i >= 0 {
			entry, env = env[:i], env[i+1:]
		} else {
			env = nil
		}
		if prefix && bytes.HasPrefix(entry, needle) || bytes.Equal(entry, needle) {
			return true
		}
	}
	return false
}
