package providers

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// A program that registers no GUI host gets ErrNoGUIHost; registration is
// database/sql's: nil functions and a second host panic.
func TestGUIHostRegistration(t *testing.T) {
	_, err := RegisteredGUIHost()
	require.ErrorIs(t, err, ErrNoGUIHost, "the providers package's own tests import no browser")
	require.Panics(t, func() { RegisterGUIHost(GUIHost{Wrap: func(p Provider) Provider { return p }}) })
	checked := errors.New("checked")
	RegisterGUIHost(GUIHost{Check: func(GUI) error { return checked }, Wrap: func(p Provider) Provider { return p }})
	t.Cleanup(func() { guiMu.Lock(); guiHost = nil; guiMu.Unlock() })
	h, err := RegisteredGUIHost()
	require.NoError(t, err)
	require.ErrorIs(t, h.Check(GUI{}), checked)
	require.Panics(t, func() { RegisterGUIHost(h) }, "a second host")
}
