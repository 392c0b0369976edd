// Package all registers every policy forkline ships (policy/script,
// policy/openai, policy/agent) with package policy, the way providers/all does for
// providers: a program imports it for its side effect and then opens
// policies by name. It holds no code of its own.
package all

import (
	_ "github.com/forkline/forkline/policy/agent"  // registers "agent"
	_ "github.com/forkline/forkline/policy/openai" // registers "openai"
	_ "github.com/forkline/forkline/policy/script" // registers "script"
)
