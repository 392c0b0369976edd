package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/forkline/forkline/providers"
)

var _ providers.Sweeper = (*Provider)(nil)

// orphanAge is how old a provider directory without an owner file must be
// before Sweep takes it for a crashed start-up's.
const orphanAge = 10 * time.Minute

// Sweep implements providers.Sweeper: under the directory Options.Dir
// named, it deletes the sandboxes of provider directories whose owner is a
// dead process of this host (runsc delete --force of every container in
// their state root: a run killed with SIGKILL leaves its sandboxes
// running), then removes those directories, and the half-made entries of
// dead processes in the rootfs cache and the golden store. Live runs, this one included, are
// left alone. With the "sweep" param off it does nothing.
func (p *Provider) Sweep(ctx context.Context) error {
	if !p.sweep {
		return nil
	}
	if err := p.checkOpen(); err != nil {
		return err
	}
	host, _ := os.Hostname()
	base := filepath.Dir(p.dir)
	ents, err := os.ReadDir(base)
	if err != nil {
		return fmt.Errorf("gvisor: sweep: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		dir := filepath.Join(base, e.Name())
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) || e.Name() == rootfsCacheName || dir == p.dir {
			continue
		}
		owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
		switch {
		case err == nil:
			first, _, _ := strings.Cut(string(owner), "\n")
			if !ownerDead(strings.TrimSpace(first), host) {
				continue
			}
		case errors.Is(err, os.ErrNotExist):
			if st, serr := os.Stat(dir); serr != nil || time.Since(st.ModTime()) < orphanAge {
				continue
			}
		default:
			continue
		}
		errs = append(errs, p.sweepDir(ctx, dir))
	}
	for _, d := range []string{p.cacheDir, p.goldens} {
		if d == "" {
			continue
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			pid, _, ok := strings.Cut(strings.TrimPrefix(e.Name(), tmpPrefix), "-")
			if !strings.HasPrefix(e.Name(), tmpPrefix) || !ok {
				continue
			}
			if ownerDead(pid+"@"+host, host) {
				errs = append(errs, os.RemoveAll(filepath.Join(d, e.Name())))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gvisor: sweeping what dead runs left (set param %s=off to skip): %w", ParamSweep, err)
	}
	return nil
}

// sweepDir deletes every container of a dead provider's state root, then
// its directory.
func (p *Provider) sweepDir(ctx context.Context, dir string) error {
	rs := &runsc{path: p.rs.path, root: filepath.Join(dir, "state"), platform: p.rs.platform}
	ids, err := rs.list(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		errs = append(errs, rs.deleteContainer(ctx, id))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// ownerDead reports whether owner ("pid@host") is a process of this host
// that no longer exists.
func ownerDead(owner, host string) bool {
	pidText, ownerHost, ok := strings.Cut(owner, "@")
	if !ok || ownerHost != host || host == "" {
		return false
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
