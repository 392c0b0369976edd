// Package linuxcap knows the names of Linux capabilities (capabilities(7)),
// so that a task file and a provider can both refuse a name the kernel does
// not have, by name, before anything runs.
//
// It is a table of kernel facts and nothing else: it does not know which
// capabilities a sandbox gets (the providers decide that) or how a task
// spells them in YAML (package task).
package linuxcap

import (
	"fmt"
	"slices"
	"strings"
)

// names are the capabilities of Linux 6.x in the order of their numbers
// (CAP_CHOWN = 0 ... CAP_CHECKPOINT_RESTORE = 40), without the CAP_ prefix,
// as Docker's CapAdd and capabilities(7) spell them.
var names = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL",
	"SETGID", "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE",
	"NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
	"SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME",
	"SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL",
	"SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
	"BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

// Names returns every known capability name, sorted.
func Names() []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return out
}

// Number returns the capability's number (its bit in /proc/PID/status
// CapEff) for a canonical name, and false for an unknown one.
func Number(name string) (int, bool) {
	i := slices.Index(names, name)
	return i, i >= 0
}

// Canonical returns the canonical spelling of a capability name: upper
// case, without the CAP_ prefix ("cap_net_raw" and "NET_RAW" are both
// "NET_RAW"). An unknown name is an error that lists the known ones.
// "ALL" is refused too: a sandbox asks for each capability by name.
func Canonical(name string) (string, error) {
	c := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "CAP_")
	if c == "ALL" {
		return "", fmt.Errorf("linuxcap: %q: name each capability (known: %s)", name, strings.Join(Names(), ", "))
	}
	if _, ok := Number(c); !ok {
		return "", fmt.Errorf("linuxcap: %q is not a Linux capability (known: %s)", name, strings.Join(Names(), ", "))
	}
	return c, nil
}

// Set decodes a capability bit mask (the hex of CapEff in /proc/PID/status)
// into sorted names; bits without a known name come back as "CAP_<n>".
func Set(mask uint64) []string {
	var out []string
	for i := 0; i < 64; i++ {
		if mask&(1<<uint(i)) == 0 {
			continue
		}
		if i < len(names) {
			out = append(out, names[i])
		} else {
			out = append(out, fmt.Sprintf("CAP_%d", i))
		}
	}
	slices.Sort(out)
	return out
}
