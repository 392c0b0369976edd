package providers

import (
	"errors"
	"sync"
)

// GUIHost is what gives a sandbox the GUI its Spec asks for (providers/browser
// registers one: Chromium beside the sandbox). It is registered, as a
// backend is, so that a program chooses it by importing it and a library
// that runs tasks (episode, collect, serve, replay) never links a browser
// it may not need.
type GUIHost struct {
	// Check refuses a GUI request the host cannot serve (a viewport out of
	// range, a start page outside the workspace or loopback), before
	// anything runs.
	Check func(GUI) error
	// Wrap returns p decorated so that a sandbox whose Spec has a GUI comes
	// with it; every other sandbox is p's as it is.
	Wrap func(p Provider) Provider
}

// ErrNoGUIHost is returned by RegisteredGUIHost when no GUI host is
// registered: the program did not import one (providers/all imports
// providers/browser).
var ErrNoGUIHost = errors.New("providers: tasks with a browser section need a GUI host, and this program registers none (import providers/browser, or providers/all)")

var (
	guiMu   sync.RWMutex
	guiHost *GUIHost
)

// RegisterGUIHost makes h the GUI host. It panics on a nil function or a
// second registration.
func RegisterGUIHost(h GUIHost) {
	guiMu.Lock()
	defer guiMu.Unlock()
	if h.Check == nil || h.Wrap == nil {
		panic("providers: RegisterGUIHost with a nil Check or Wrap")
	}
	if guiHost != nil {
		panic("providers: RegisterGUIHost called twice")
	}
	guiHost = &h
}

// RegisteredGUIHost returns the registered GUI host, or ErrNoGUIHost.
func RegisteredGUIHost() (GUIHost, error) {
	guiMu.RLock()
	defer guiMu.RUnlock()
	if guiHost == nil {
		return GUIHost{}, ErrNoGUIHost
	}
	return *guiHost, nil
}
