// Package all registers every sandbox backend forkline ships (local,
// docker and gvisor) with package providers. Programs and libraries that open
// providers by name (collect, replay, the commands) import it for its side
// effect, instead of importing backends one by one:
//
//	import _ "github.com/forkline/forkline/providers/all"
//
// It owns nothing else. It must not be imported by providers or by a
// backend, and knows no decorator (the browser one wraps a provider after
// it is opened).
package all

import (
	_ "github.com/forkline/forkline/providers/docker" // registers "docker"
	_ "github.com/forkline/forkline/providers/gvisor" // registers "gvisor"
	_ "github.com/forkline/forkline/providers/local"  // registers "local"
)
