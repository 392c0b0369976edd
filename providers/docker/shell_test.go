package docker

import (
	"testing"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/providertest"
)

func TestPersistentShell(t *testing.T) {
	engine(t)
	providertest.PersistentShell(t, open(t, nil), providers.Spec{})
}

func TestTerminal(t *testing.T) {
	engine(t)
	providertest.Terminal(t, open(t, nil), providers.Spec{})
}
