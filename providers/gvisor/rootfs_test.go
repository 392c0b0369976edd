package gvisor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
)

// busyboxRootfs makes a root filesystem directory from the host's static
// busybox (Debian's busybox-static) with BusyboxRootfs.
func busyboxRootfs(t testing.TB) string {
	t.Helper()
	const bin = "/bin/busybox"
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "gvisor", "no "+bin+" to make a root filesystem of (apt-get install busybox-static)")
	}
	dir := filepath.Join(t.TempDir(), "rootfs")
	require.NoError(t, BusyboxRootfs(dir, bin))
	return dir
}
