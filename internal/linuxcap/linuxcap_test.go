package linuxcap

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
)

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{
		"NET_RAW": "NET_RAW", "net_raw": "NET_RAW", "CAP_NET_RAW": "NET_RAW", " cap_mknod ": "MKNOD",
		"CHECKPOINT_RESTORE": "CHECKPOINT_RESTORE",
	} {
		got, err := Canonical(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"NET_RAWR", "", "ALL", "cap_all", "CAP_"} {
		_, err := Canonical(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "known: AUDIT_CONTROL, AUDIT_READ", "the refusal lists the known names")
	}
}

// The table matches the kernel this runs on: one name per capability the
// kernel has, no more.
func TestNamesMatchKernel(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		testenv.Inapplicable(t, fmt.Sprintf("no /proc/sys/kernel/cap_last_cap: %v", err))
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(names), last+1, "a capability of this kernel has no name here")
	n, ok := Number("NET_RAW")
	require.True(t, ok)
	require.Equal(t, 13, n)
	n, _ = Number("CHECKPOINT_RESTORE")
	require.Equal(t, 40, n)
}

func TestSet(t *testing.T) {
	// CapEff of Docker's default set (checked on a container).
	require.Equal(t, []string{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
		"NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}, Set(0xa80425fb))
	require.Empty(t, Set(0))
	require.Equal(t, []string{"CAP_63"}, Set(1<<63))
}
