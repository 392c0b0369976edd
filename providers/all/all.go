// Package all registers every sandbox backend forkline ships (local,
// docker and gvisor) and the GUI host (the browser) with package providers. Programs
// that open providers by name (the command, benchmarks, tests) import it for
// its side effect, instead of importing backends one by one; the libraries
// (collect, replay, serve) never do, so a program that embeds them links
// only the backends it chooses:
//
//	import _ "github.com/forkline/forkline/providers/all"
//
// It owns nothing else. It must not be imported by providers, by a backend
// or by a library.
package all

import (
	_ "github.com/forkline/forkline/providers/browser" // registers the GUI host
	_ "github.com/forkline/forkline/providers/docker"  // registers "docker"
	_ "github.com/forkline/forkline/providers/gvisor"  // registers "gvisor"
	_ "github.com/forkline/forkline/providers/local"   // registers "local"
)
