package local

import (
	"context"
	"fmt"
	"path/filepath"
)

// Sweep implements providers.Sweeper: it sweeps the directory this provider
// lives in (Options.Dir or os.TempDir()) with the package-level Sweep, which
// leaves live providers, this one included, alone. A sweep is a few
// directory reads and unmounts, so ctx is only checked before it begins.
func (p *Provider) Sweep(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: sweep: %w", err)
	}
	return Sweep(filepath.Dir(p.root))
}
