package docker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
)

// An image's files come out of the engine as a tree a chroot can use: the
// tree forkline/chromium starts from when forkline/debian is on the engine
// (before, it ran debootstrap again).
func TestExportImageTree(t *testing.T) {
	cli := engine(t)
	if os.Geteuid() != 0 {
		t.Skip("extracting device nodes needs root")
	}
	dir := t.TempDir()
	require.NoError(t, exportImageTree(t.Context(), cli, ImageBusybox, dir))
	st, err := os.Stat(filepath.Join(dir, "bin", "busybox"))
	require.NoError(t, err)
	require.NotZero(t, st.Mode()&0o111, "modes are kept")
	null, err := os.Stat(filepath.Join(dir, "dev", "null"))
	require.NoError(t, err)
	require.NotZero(t, null.Mode()&os.ModeCharDevice)
	// The container made for the export is gone.
	list, err := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelImage+"=export")})
	require.NoError(t, err)
	require.Empty(t, list.Items)
}
