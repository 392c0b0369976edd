package agent_test

// collect, which these tests run episodes through, chooses no backends (the
// program does); the tests choose every provider.
import _ "github.com/forkline/forkline/providers/all"
