package episode

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/task"
)

// A task's limits reach the provider spec, capabilities included.
func TestTemplateLimits(t *testing.T) {
	specs, err := task.Parse("t.yaml", []byte("id: a\ninstruction: x\nlimits:\n  cpus: 0.5\n  memory_mb: 256\n  pids: 64\n  capabilities: [net_raw]\n"))
	require.NoError(t, err)
	tpl, err := Template(&specs[0])
	require.NoError(t, err)
	res := tpl.Spec.Resources
	require.Equal(t, 0.5, res.CPUs)
	require.Equal(t, int64(256), res.MemoryMB)
	require.Equal(t, int64(64), res.Pids)
	require.Equal(t, []string{"NET_RAW"}, res.Capabilities)
}
