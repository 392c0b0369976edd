package collect

// The library never chooses backends (the program does: cmd/forkline imports
// these); its tests choose every one.
import (
	_ "github.com/forkline/forkline/policy/all"
	_ "github.com/forkline/forkline/providers/all"
)
