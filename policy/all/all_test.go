package all_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/policy"
	_ "github.com/forkline/forkline/policy/all"
)

func TestRegistersEveryPolicy(t *testing.T) {
	require.Equal(t, []string{"agent", "openai", "script"}, policy.Names())
}
