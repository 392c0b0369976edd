package gvisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
)

// busyboxRootfs makes a root filesystem directory from the host's static
// busybox (Debian's busybox-static): bin/busybox and a symlink per applet,
// /workspace, /tmp, /etc/passwd with root.
func busyboxRootfs(t testing.TB) string {
	t.Helper()
	const bin = "/bin/busybox"
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "gvisor", "no "+bin+" to make a root filesystem of (apt-get install busybox-static)")
	}
	dir := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "workspace", "tmp", "etc", "root", "proc", "dev", "sys"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	require.NoError(t, os.Chmod(filepath.Join(dir, "tmp"), 0o1777))
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755))
	out, err := exec.Command(bin, "--list").Output()
	require.NoError(t, err)
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		require.NoError(t, os.Symlink("busybox", filepath.Join(dir, "bin", applet)))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc", "group"), []byte("root:x:0:\n"), 0o644))
	return dir
}
