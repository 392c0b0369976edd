package task

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseCapabilities(t *testing.T) {
	specs, err := Parse("caps.yaml", []byte("id: a\ninstruction: x\nlimits:\n  capabilities: [net_raw, CAP_SYS_PTRACE, MKNOD]\n"))
	require.NoError(t, err)
	require.Equal(t, []string{"MKNOD", "NET_RAW", "SYS_PTRACE"}, specs[0].Limits.Capabilities, "canonical and sorted")

	// Spelling and order do not change the spec's identity; an empty list
	// is the same as none, so existing hashes stay.
	other, err := Parse("caps.yaml", []byte("id: a\ninstruction: x\nlimits:\n  capabilities: [SYS_PTRACE, MKNOD, NET_RAW]\n"))
	require.NoError(t, err)
	require.Equal(t, specs[0].Hash(), other[0].Hash())
	none, err := Parse("caps.yaml", []byte("id: a\ninstruction: x\n"))
	require.NoError(t, err)
	empty, err := Parse("caps.yaml", []byte("id: a\ninstruction: x\nlimits:\n  capabilities: []\n"))
	require.NoError(t, err)
	require.Equal(t, none[0].Hash(), empty[0].Hash())
	require.NotEqual(t, none[0].Hash(), specs[0].Hash())

	cases := []struct{ name, yaml, want string }{
		{"unknown", "id: a\ninstruction: x\nlimits:\n  capabilities: [NET_RAW, NET_RAWR]\n",
			`caps.yaml:4:27: field limits.capabilities[1]: "NET_RAWR" is not a Linux capability (known: AUDIT_CONTROL, AUDIT_READ,`},
		{"all", "id: a\ninstruction: x\nlimits:\n  capabilities: [ALL]\n", `field limits.capabilities[0]: "ALL": name each capability`},
		{"twice", "id: a\ninstruction: x\nlimits:\n  capabilities:\n    - NET_RAW\n    - cap_net_raw\n", "caps.yaml:6:7: field limits.capabilities[1]: NET_RAW is listed twice"},
		{"notAList", "id: a\ninstruction: x\nlimits:\n  capabilities: NET_RAW\n", "field limits.capabilities: must be a list of capability names"},
		{"notAString", "id: a\ninstruction: x\nlimits:\n  capabilities: [[NET_RAW]]\n", "field limits.capabilities[0]: must be a string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("caps.yaml", []byte(c.yaml))
			require.ErrorIs(t, err, ErrSpec)
			require.ErrorContains(t, err, c.want)
		})
	}
}
