package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/forkline/forkline/providers"
)

// The Checkpoint.Method values of this provider.
const (
	// MethodTree: the workspace as commands see it was copied into a new
	// tree (a golden, a copy-mode fork, a stack too deep to grow).
	MethodTree = "tree"
	// MethodLayer: an overlay fork's upper layer — only what the fork
	// changed — was frozen in place and stacked on the checkpoint the fork
	// came from; the fork goes on in a fresh upper layer over it.
	MethodLayer = "layer"
	// MethodLayerCopy: the upper layer was copied instead, because the fork
	// was busy (a process it started still holds the workspace).
	MethodLayerCopy = "layer-copy"
)

// maxLayers bounds a checkpoint's stack: a deeper one is flattened into a
// tree. Every layer is a lookup an overlay makes for a path it does not
// find higher up, and a branch tree rarely needs more.
const maxLayers = 64

// checkpointLayer freezes an overlay fork's changes into a layer over the
// checkpoint it came from, so the cost grows with what the episode changed,
// not with the workspace. It reports ok false, doing nothing, when the
// stack cannot grow (too deep, or its mount options would not fit); the
// caller then copies the workspace.
//
// When nothing holds the workspace (no action in flight, no process of the
// fork with a file or its directory there), the upper layer itself becomes
// the new layer: the overlay is unmounted, the upper directory renamed into
// the checkpoint, and the workspace mounted again over the new stack with a
// fresh upper layer. That takes a rename and two mount calls whatever the
// diff. When something holds it, the upper layer is copied (whiteouts and
// overlay attributes kept), as a golden is: a file being written meanwhile
// is copied as it is at that moment.
func (p *Provider) checkpointLayer(ctx context.Context, s *sandbox, label string) (providers.Checkpoint, bool, error) {
	began := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return providers.Checkpoint{}, true, fmt.Errorf("local: sandbox %s: %w", s.id, providers.ErrClosed)
	}
	base := s.uses
	if base == nil || len(base.layers)+1 > maxLayers {
		return providers.Checkpoint{}, false, nil
	}
	id, dir, err := p.newDir("cp")
	if err != nil {
		return providers.Checkpoint{}, true, err
	}
	layer := filepath.Join(dir, "layer")
	layers := append([]string{layer}, base.layers...)
	upper, work := filepath.Join(s.dir, "upper"), filepath.Join(s.dir, "work")
	if len(overlayOptions(layers, upper, work, p.overlay)) >= maxMountData {
		_ = removeTree(dir)
		return providers.Checkpoint{}, false, nil
	}
	cp := &checkpoint{
		info: providers.Checkpoint{ID: id, Label: label, Provider: Name},
		dir:  dir, layers: layers, base: base,
		env: append([]string(nil), s.spec.env...), outputCap: s.spec.outputCap, pidsMax: s.spec.pidsMax,
	}
	frozen, err := s.freezeUpper(layer, layers, p.overlay)
	if err == nil && !frozen {
		cp.info.Method = MethodLayerCopy
		err = p.copier.copyLayer(ctx, upper, layer)
	}
	if err != nil {
		_ = removeTree(dir)
		return providers.Checkpoint{}, true, fmt.Errorf("local: checkpoint of %s: %w", s.id, err)
	}
	if frozen {
		cp.info.Method = MethodLayer
	}
	size, err := treeBytes(layer)
	if err != nil {
		_ = removeTree(dir)
		return providers.Checkpoint{}, true, fmt.Errorf("local: checkpoint of %s: %w", s.id, err)
	}
	cp.info.Bytes, cp.info.Took = size, time.Since(began)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = removeTree(dir)
		return providers.Checkpoint{}, true, fmt.Errorf("local: checkpoint: %w", providers.ErrClosed)
	}
	base.users++ // the layer is stacked on base for as long as it lives
	if frozen {
		// The fork now stands on the new stack: its use moves from base
		// (still held, by the layer) to the new checkpoint.
		cp.users++
		s.uses, s.cpID = cp, id
		base.users--
	}
	p.checkpoints[id] = cp
	return cp.info, true, nil
}

// freezeUpper turns s's upper layer into layer and mounts the workspace
// again over layers (layer on top) with a fresh upper layer, when nothing
// holds the workspace; frozen is false, and nothing changed, when
// something does. Called with s.mu held.
func (s *sandbox) freezeUpper(layer string, layers []string, extra string) (frozen bool, err error) {
	if s.active > 0 {
		return false, nil
	}
	// The os.Root of file actions holds the workspace open; no action is in
	// flight, and none starts while s.mu is held.
	if err := s.root.Close(); err != nil {
		return false, err
	}
	reopen := func() error {
		root, err := os.OpenRoot(s.ws)
		if err != nil {
			return fmt.Errorf("reopening the workspace: %w", err)
		}
		s.root = root
		return nil
	}
	if err := unix.Unmount(s.ws, 0); err != nil {
		// EBUSY: a process of the fork (a background job) has its
		// directory or a file there. Copy instead.
		if rerr := reopen(); rerr != nil {
			return false, rerr
		}
		if errors.Is(err, unix.EBUSY) {
			return false, nil
		}
		return false, fmt.Errorf("unmount %s: %w", s.ws, err)
	}
	upper, work := filepath.Join(s.dir, "upper"), filepath.Join(s.dir, "work")
	restore := func(cause error) error {
		// Put the fork back as it was, over its old stack.
		if _, serr := os.Stat(layer); serr == nil {
			_ = os.Rename(layer, upper)
		}
		_ = removeTree(work)
		_ = os.Mkdir(work, 0o755)
		merr := unix.Mount("overlay", s.ws, "overlay", 0, overlayOptions(layers[1:], upper, work, extra))
		return errors.Join(cause, merr, reopen())
	}
	if err := os.Rename(upper, layer); err != nil {
		return false, restore(err)
	}
	// A workdir used by a volatile mount is refused by the next one: make
	// it anew.
	if err := removeTree(work); err != nil {
		return false, restore(err)
	}
	if err := mountOverlay(layers, s.dir, s.ws, extra); err != nil {
		_ = removeTree(upper)
		_ = removeTree(work)
		return false, restore(err)
	}
	return true, reopen()
}

// copyOverlayXattrs copies the overlay's own extended attributes
// (trusted.overlay.* as root, user.overlay.* in a user namespace: opaque,
// redirect, whiteout, ...) from src to dst, without following symlinks.
func copyOverlayXattrs(src, dst string) error {
	size, err := unix.Llistxattr(src, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(src, buf)
	if err != nil {
		return err
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "trusted.overlay.") && !strings.HasPrefix(name, "user.overlay.") {
			continue
		}
		vsize, err := unix.Lgetxattr(src, name, nil)
		if err != nil {
			return err
		}
		val := make([]byte, vsize)
		if vsize, err = unix.Lgetxattr(src, name, val); err != nil {
			return err
		}
		if err := unix.Lsetxattr(dst, name, val[:vsize], 0); err != nil {
			return fmt.Errorf("setting %s on %s: %w", name, dst, err)
		}
	}
	return nil
}

// treeBytes sums the sizes of the regular files under dir.
func treeBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}
