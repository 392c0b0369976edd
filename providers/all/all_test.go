package all_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
	_ "github.com/forkline/forkline/providers/all"
)

// Importing all is enough to open every backend by name.
func TestRegistersEveryBackend(t *testing.T) {
	require.Equal(t, []string{"docker", "gvisor", "local"}, providers.Names())
}
