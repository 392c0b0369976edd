package local

import (
	"context"
	"path/filepath"
)

// Sweep implements providers.Sweeper: it sweeps the directory this provider
// lives in (Options.Dir or os.TempDir()) with the package-level Sweep, which
// leaves live providers, this one included, alone.
func (p *Provider) Sweep(ctx context.Context) error {
	return Sweep(filepath.Dir(p.root))
}
