package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// DirEnv names the environment variable that moves the install cache.
const DirEnv = "FORKLINE_AGENTS_DIR"

// DefaultDir is where installs are cached: $FORKLINE_AGENTS_DIR, else
// forkline/agents under the user's cache directory ($XDG_CACHE_HOME or
// ~/.cache).
func DefaultDir() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		return filepath.Abs(d)
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("harness: no cache directory (set %s): %w", DirEnv, err)
	}
	return filepath.Join(c, "forkline", "agents"), nil
}

// Installed is one harness installed in the cache.
type Installed struct {
	Profile
	// Key is the hex sha256 of what the install is made from: the pinned
	// package.json and package-lock.json and the platform. The install's
	// directory is named after it, so a new pin is a new directory and an
	// install never changes under a sandbox that mounts it.
	Key string
	// Dir is the install's directory (read-only for sandboxes).
	Dir string
	// Binary is the executable's path relative to Dir.
	Binary string
}

// BinaryPath is the executable's absolute path on the host.
func (in Installed) BinaryPath() string { return filepath.Join(in.Dir, in.Binary) }

// ErrNotInstalled is wrapped by Find's error for a harness not in the
// cache; the error names the command that installs it.
var ErrNotInstalled = errors.New("harness: not installed")

// key is the install's content key.
func (p Profile) key() (string, error) {
	pkg, lock, err := p.lockfiles()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s/%s\n", runtime.GOOS, runtime.GOARCH)
	h.Write(pkg)
	h.Write([]byte{0})
	h.Write(lock)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// stamp is the file an install is complete with: what it is.
const stamp = "forkline-harness.json"

type stampFile struct {
	Name    string `json:"name"`
	Package string `json:"package"`
	Version string `json:"version"`
	Key     string `json:"key"`
	Binary  string `json:"binary"`
	// Reported is what the executable said when asked its version.
	Reported string `json:"reported_version"`
}

// Find returns the install of name in dir ("" for DefaultDir).
func Find(name, dir string) (Installed, error) {
	p, err := Lookup(name)
	if err != nil {
		return Installed{}, err
	}
	if dir == "" {
		if dir, err = DefaultDir(); err != nil {
			return Installed{}, err
		}
	}
	key, err := p.key()
	if err != nil {
		return Installed{}, err
	}
	bin, err := p.Binary()
	if err != nil {
		return Installed{}, err
	}
	in := Installed{Profile: p, Key: key, Dir: filepath.Join(dir, p.Name+"-"+key[:16]), Binary: bin}
	if _, err := os.Stat(filepath.Join(in.Dir, stamp)); err != nil {
		return Installed{}, fmt.Errorf("%w: %s %s (%s@%s) is not in %s; install it with: forkline images -agent %s",
			ErrNotInstalled, p.Name, p.Version, p.Package, p.Version, dir, p.Name)
	}
	if _, err := os.Stat(in.BinaryPath()); err != nil {
		return Installed{}, fmt.Errorf("%w: the install of %s in %s has no %s: remove the directory and run forkline images -agent %s",
			ErrNotInstalled, p.Name, in.Dir, bin, p.Name)
	}
	return in, nil
}

// Status is what Install did.
type Status struct {
	Installed
	// Fresh reports that it was installed now rather than found.
	Fresh bool
	Took  time.Duration
}

// Install makes sure name is installed in dir ("" for DefaultDir): found
// there, or installed now with npm ci from the pinned lockfile (install
// scripts not run: every harness here ships its executable as a platform
// package), checked by running its executable's version command, and
// moved into place whole. log gets npm's output. It needs npm on PATH.
func Install(ctx context.Context, name, dir string, log io.Writer) (Status, error) {
	if in, err := Find(name, dir); err == nil {
		return Status{Installed: in}, nil
	} else if !errors.Is(err, ErrNotInstalled) {
		return Status{}, err
	}
	began := time.Now()
	p, _ := Lookup(name)
	if dir == "" {
		var err error
		if dir, err = DefaultDir(); err != nil {
			return Status{}, err
		}
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return Status{}, fmt.Errorf("harness: installing %s needs npm (Node.js), which is not on PATH: on Debian, apt-get install npm", name)
	}
	key, err := p.key()
	if err != nil {
		return Status{}, err
	}
	bin, err := p.Binary()
	if err != nil {
		return Status{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Status{}, fmt.Errorf("harness: %w", err)
	}
	final := filepath.Join(dir, p.Name+"-"+key[:16])
	tmp, err := os.MkdirTemp(dir, ".install-"+p.Name+"-")
	if err != nil {
		return Status{}, fmt.Errorf("harness: %w", err)
	}
	defer os.RemoveAll(tmp)
	pkg, lock, err := p.lockfiles()
	if err != nil {
		return Status{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), pkg, 0o644); err != nil {
		return Status{}, fmt.Errorf("harness: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "package-lock.json"), lock, 0o644); err != nil {
		return Status{}, fmt.Errorf("harness: %w", err)
	}
	if log == nil {
		log = io.Discard
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--omit=dev")
	cmd.Dir = tmp
	cmd.Stdout = io.MultiWriter(log, &out)
	cmd.Stderr = io.MultiWriter(log, &out)
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return Status{}, ctx.Err()
		}
		return Status{}, fmt.Errorf("harness: npm ci of %s@%s failed (%v): %s", p.Package, p.Version, err, tail(out.String(), 2000))
	}
	binPath := filepath.Join(tmp, bin)
	if _, err := os.Stat(binPath); err != nil {
		return Status{}, fmt.Errorf("harness: npm installed %s@%s without %s (this platform is %s/%s)", p.Package, p.Version, bin, runtime.GOOS, runtime.GOARCH)
	}
	vctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ver := exec.CommandContext(vctx, binPath, "--version")
	ver.Dir = tmp
	ver.Env = []string{"HOME=" + tmp, "PATH=" + os.Getenv("PATH")}
	reported, err := ver.CombinedOutput()
	if err != nil {
		return Status{}, fmt.Errorf("harness: %s --version failed after the install (%v): %s", bin, err, tail(string(reported), 1000))
	}
	if !strings.Contains(string(reported), p.Version) {
		return Status{}, fmt.Errorf("harness: %s --version says %q, not the pinned %s", bin, strings.TrimSpace(string(reported)), p.Version)
	}
	// What the version command left in the scratch HOME is not the
	// install's.
	for _, junk := range []string{".claude", ".claude.json", ".codex", ".config", ".local", ".cache", ".npm"} {
		_ = os.RemoveAll(filepath.Join(tmp, junk))
	}
	st, _ := json.MarshalIndent(stampFile{Name: p.Name, Package: p.Package, Version: p.Version, Key: key, Binary: bin,
		Reported: strings.TrimSpace(string(reported))}, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, stamp), append(st, '\n'), 0o644); err != nil {
		return Status{}, fmt.Errorf("harness: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Status{}, fmt.Errorf("harness: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, stamp)); serr == nil {
			// Another install finished first: the same content.
			in, ferr := Find(name, dir)
			return Status{Installed: in, Took: time.Since(began)}, ferr
		}
		return Status{}, fmt.Errorf("harness: %w", err)
	}
	in, err := Find(name, dir)
	return Status{Installed: in, Fresh: true, Took: time.Since(began)}, err
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
