package providers

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/runtime"
)

func TestSpecValidate(t *testing.T) {
	require.NoError(t, Spec{Env: []string{"A=1", "B=", "C=x=y"}, Resources: Resources{CPUs: 0.5, Capabilities: []string{"cap_net_raw", "MKNOD"}}}.Validate())
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"envNUL", Spec{Env: []string{"SECRET=abc\x00def"}}, `Env[0] "SECRET" holds a NUL byte`},
		{"envNULInKey", Spec{Env: []string{"A\x00B=1"}}, `holds a NUL byte`},
		{"envNoEquals", Spec{Env: []string{"A=1", "B"}}, `Env[1] "B" is not KEY=VALUE`},
		{"envEmptyName", Spec{Env: []string{"=1"}}, `Env[0] has an empty name`},
		{"cpusNegative", Spec{Resources: Resources{CPUs: -1}}, "Resources.CPUs -1"},
		{"cpusNaN", Spec{Resources: Resources{CPUs: math.NaN()}}, "Resources.CPUs NaN"},
		{"cpusInf", Spec{Resources: Resources{CPUs: math.Inf(1)}}, "Resources.CPUs +Inf"},
		{"memory", Spec{Resources: Resources{MemoryMB: -5}}, "Resources.MemoryMB -5"},
		{"pids", Spec{Resources: Resources{Pids: -1}}, "Resources.Pids -1"},
		{"capUnknown", Spec{Resources: Resources{Capabilities: []string{"NET_RAW", "FLY"}}}, `"FLY" is not a Linux capability (known: AUDIT_CONTROL`},
		{"capAll", Spec{Resources: Resources{Capabilities: []string{"ALL"}}}, `"ALL": name each capability`},
		{"capTwice", Spec{Resources: Resources{Capabilities: []string{"NET_RAW", "cap_net_raw"}}}, "NET_RAW is listed twice"},
		{"outputCap", Spec{OutputCap: -1}, "OutputCap -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.spec.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
			require.NotContains(t, err.Error(), "abc", "an env value never appears in the error")
		})
	}
}

func TestCanonicalCapabilities(t *testing.T) {
	got, err := CanonicalCapabilities([]string{"sys_ptrace", "CAP_NET_RAW", "MKNOD"})
	require.NoError(t, err)
	require.Equal(t, []string{"MKNOD", "NET_RAW", "SYS_PTRACE"}, got)
	got, err = CanonicalCapabilities(nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestShellRefusesNUL(t *testing.T) {
	ran := false
	ops := ShellOps{Provider: "fake", Exec: func(context.Context, runtime.Action) (runtime.Observation, error) {
		ran = true
		return runtime.Observation{}, nil
	}}
	obs, err := Shell(context.Background(), runtime.Action{Kind: runtime.ActExec, Cmd: "echo a\x00b"}, ops)
	require.NoError(t, err)
	require.False(t, ran, "a command holding a NUL never reaches the backend")
	require.True(t, obs.Error)
	require.Equal(t, runtime.ErrActionFail, obs.ErrorKind)
	require.Equal(t, -1, obs.ExitCode)
	require.Contains(t, obs.Text(), "NUL byte at offset 6")
	_, err = Shell(context.Background(), runtime.Action{Kind: runtime.ActExec, Cmd: "echo ab"}, ops)
	require.NoError(t, err)
	require.True(t, ran)
}
