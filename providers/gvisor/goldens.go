package gvisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/forkline/forkline/providers"
)

// The golden store (the "goldens" param): a directory that keeps the
// checkpoint images of goldens — sandboxes made by Create and checkpointed
// — across runs, one directory per golden:
//
//	DIR/KEY/checkpoint.img   the image (a hard link when on the same filesystem)
//	DIR/KEY/golden.json      storedGolden: what made it, and the image's sha256
//
// KEY is a digest of the checkpoint's label (the pool's template key: task
// id and spec hash) and of everything the image depends on: the root
// filesystem (image id, or directory), the sandbox's environment and
// limits, runsc's version and platform. A later run whose golden has the
// same key restores the stored image instead of running setup and start
// again (providers.GoldenStore); a resumed run does too. Prepare checks
// every stored golden before the first episode: an image whose sha256 is
// not the one recorded (corrupt, truncated) or made by another runsc
// version or platform (runsc restores only its own) fails Prepare, naming
// the directory to remove. A golden of a "rootfs" directory holds only the
// sandbox's changes to it: the directory must not change while goldens of
// it are kept.

// goldenMeta is the file that describes a stored golden.
const goldenMeta = "golden.json"

// storedGolden is golden.json.
type storedGolden struct {
	Label        string    `json:"label"`
	Rootfs       string    `json:"rootfs"`
	RunscVersion string    `json:"runsc_version"`
	Platform     string    `json:"platform"`
	SHA256       string    `json:"sha256"`
	Bytes        int64     `json:"bytes"`
	Made         time.Time `json:"made"`
}

// goldenKey is the store's key of a golden labelled label of a sandbox
// with spec ss.
func (p *Provider) goldenKey(label string, ss sandboxSpec) string {
	key := map[string]any{
		"label": label, "rootfs": ss.fs.what, "rootfs_dir": ss.fs.dir, "image_env": ss.fs.env, "workdir": ss.fs.workdir,
		"env": ss.env, "output_cap": ss.outputCap, "cpus": ss.cpus, "memory_mb": ss.memoryMB, "pids": ss.pids,
		"caps": ss.caps, "network": ss.network, "runsc": p.rs.version, "platform": p.rs.platform,
	}
	if ss.shell == providers.ShellPersistent {
		// Its image holds the shell setup ran in (absent from a fresh
		// golden's); the keys of fresh goldens stay what they were.
		key["shell"] = string(ss.shell)
	}
	b, _ := json.Marshal(key)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// storeGolden keeps the image of a golden just checkpointed (in cpDir)
// under its key, unless the store has it. The store's copy is made in a
// temporary directory and renamed, so a key's directory exists only
// complete.
func (p *Provider) storeGolden(label string, ss sandboxSpec, cpDir string) error {
	dest := filepath.Join(p.goldens, p.goldenKey(label, ss))
	if _, err := os.Stat(dest); err == nil {
		return nil
	}
	tmp := filepath.Join(p.goldens, tmpPrefix+fmt.Sprint(os.Getpid())+"-"+randomHex(4))
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	img := filepath.Join(tmp, imageFile)
	if err := os.Link(filepath.Join(cpDir, imageFile), img); err != nil {
		if err := copyFile(filepath.Join(cpDir, imageFile), img); err != nil {
			return err
		}
	}
	sum, size, err := fileSHA256(img)
	if err != nil {
		return err
	}
	meta, err := json.MarshalIndent(storedGolden{Label: label, Rootfs: ss.fs.what, RunscVersion: p.rs.version, Platform: p.rs.platform,
		SHA256: sum, Bytes: size, Made: time.Now().UTC()}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, goldenMeta), append(meta, '\n'), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, dest); err != nil {
		if _, serr := os.Stat(dest); serr == nil {
			return nil // another run stored it meanwhile
		}
		return err
	}
	return nil
}

var _ providers.GoldenStore = (*Provider)(nil)

// StoredGolden implements providers.GoldenStore: with the "goldens" param
// set, the golden an earlier run stored for spec and label, linked into
// this provider as a checkpoint (Release removes the link, not the stored
// golden). Without the param it has none.
func (p *Provider) StoredGolden(ctx context.Context, spec providers.Spec, label string) (providers.Checkpoint, bool, error) {
	if p.goldens == "" {
		return providers.Checkpoint{}, false, nil
	}
	if err := spec.Validate(); err != nil {
		return providers.Checkpoint{}, false, fmt.Errorf("gvisor: %w", err)
	}
	ss, _, err := p.resolveSpec(ctx, spec, nil)
	if err != nil {
		return providers.Checkpoint{}, false, err
	}
	src := filepath.Join(p.goldens, p.goldenKey(label, ss))
	meta, err := readGoldenMeta(src)
	if errors.Is(err, os.ErrNotExist) {
		return providers.Checkpoint{}, false, nil
	}
	if err != nil {
		return providers.Checkpoint{}, false, err
	}
	if err := p.checkGoldenMeta(src, meta); err != nil {
		return providers.Checkpoint{}, false, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return providers.Checkpoint{}, false, fmt.Errorf("gvisor: %w", providers.ErrClosed)
	}
	p.seq++
	cpID := fmt.Sprintf("cp-%s-%d", p.instance, p.seq)
	p.mu.Unlock()
	dir := filepath.Join(p.dir, "checkpoints", cpID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return providers.Checkpoint{}, false, fmt.Errorf("gvisor: %w", err)
	}
	if err := os.Link(filepath.Join(src, imageFile), filepath.Join(dir, imageFile)); err != nil {
		if err := copyFile(filepath.Join(src, imageFile), filepath.Join(dir, imageFile)); err != nil {
			_ = os.RemoveAll(dir)
			return providers.Checkpoint{}, false, fmt.Errorf("gvisor: stored golden %s: %w", src, err)
		}
	}
	cp := providers.Checkpoint{ID: cpID, Label: label, Provider: Name, Bytes: meta.Bytes, Method: MethodStored}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = os.RemoveAll(dir)
		return providers.Checkpoint{}, false, fmt.Errorf("gvisor: %w", providers.ErrClosed)
	}
	p.checkpoints[cpID] = &checkpoint{info: cp, dir: dir, spec: ss}
	return cp, true, nil
}

// MethodStored is the Checkpoint.Method of a golden taken from the store.
const MethodStored = "stored"

func readGoldenMeta(dir string) (storedGolden, error) {
	var meta storedGolden
	b, err := os.ReadFile(filepath.Join(dir, goldenMeta))
	if err != nil {
		return meta, err
	}
	if err := json.Unmarshal(b, &meta); err != nil || meta.SHA256 == "" {
		return meta, fmt.Errorf("gvisor: %w: stored golden %s: %s is not a golden's description (%v): remove the directory", providers.ErrCannotPrepare, dir, goldenMeta, err)
	}
	return meta, nil
}

// checkGoldenMeta refuses a golden this runsc cannot restore.
func (p *Provider) checkGoldenMeta(dir string, meta storedGolden) error {
	if meta.RunscVersion != p.rs.version || meta.Platform != p.rs.platform {
		return fmt.Errorf("gvisor: %w: stored golden %s was made by %q on platform %s; this is %q on platform %s, and runsc restores only its own images: remove the directory (or give -provider-opt %s= another directory)",
			providers.ErrCannotPrepare, dir, meta.RunscVersion, meta.Platform, p.rs.version, p.rs.platform, ParamGoldens)
	}
	return nil
}

// checkStore checks every golden in the store before a run uses any: its
// description, runsc version and platform, and its image's sha256.
func (p *Provider) checkStore() error {
	if p.goldens == "" {
		return nil
	}
	ents, err := os.ReadDir(p.goldens)
	if err != nil {
		return fmt.Errorf("gvisor: %w: param %s: %w", providers.ErrCannotPrepare, ParamGoldens, err)
	}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		dir := filepath.Join(p.goldens, e.Name())
		meta, err := readGoldenMeta(dir)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				err = fmt.Errorf("gvisor: %w: stored golden %s has no %s: remove the directory", providers.ErrCannotPrepare, dir, goldenMeta)
			}
			errs = append(errs, err)
			continue
		}
		if err := p.checkGoldenMeta(dir, meta); err != nil {
			errs = append(errs, err)
			continue
		}
		sum, size, err := fileSHA256(filepath.Join(dir, imageFile))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("gvisor: %w: stored golden %s: %w: remove the directory", providers.ErrCannotPrepare, dir, err))
		case sum != meta.SHA256 || size != meta.Bytes:
			errs = append(errs, fmt.Errorf("gvisor: %w: stored golden %s is corrupt: its image has sha256 %s (%d bytes), %s recorded %s (%d bytes): remove the directory",
				providers.ErrCannotPrepare, dir, sum[:12], size, goldenMeta, meta.SHA256[:min(12, len(meta.SHA256))], meta.Bytes))
		}
	}
	return errors.Join(errs...)
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
