package providers

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// WorkspaceRoot is the workspace path as commands inside a sandbox see it in
// providers that have their own filesystem namespace (docker). Absolute paths
// in file actions are accepted when they lie under it.
const WorkspaceRoot = "/workspace"

// ErrPathEscapes is returned by ResolvePath for a path outside the workspace.
var ErrPathEscapes = errors.New("path escapes the workspace")

// ResolvePath turns the path of a read_file or write_file action into a clean
// workspace-relative path with forward slashes. Relative paths are taken from
// the workspace root; absolute paths must lie under WorkspaceRoot. Anything
// that would leave the workspace ("..", another absolute path) is refused with
// an error wrapping ErrPathEscapes. Every provider applies this same rule;
// each must also refuse symlinks that lead outside (local uses os.Root).
func ResolvePath(p string) (string, error) { return ResolvePathUnder(WorkspaceRoot, p) }

// ResolvePathUnder is ResolvePath for a sandbox whose workspace is root (an
// absolute path inside the sandbox): absolute paths must lie under root.
// A docker sandbox's workspace is its image's WORKDIR.
func ResolvePathUnder(root, p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("providers: empty path")
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("providers: path %q contains a NUL byte", p)
	}
	if path.IsAbs(p) {
		rel, ok := strings.CutPrefix(path.Clean(p), root)
		if root == "/" {
			rel, ok = path.Clean(p), true
		}
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
			return "", fmt.Errorf("providers: %q: %w (absolute paths must be under %s)", p, ErrPathEscapes, root)
		}
		p = strings.TrimPrefix(rel, "/")
		if p == "" {
			p = "."
		}
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("providers: %q: %w", p, ErrPathEscapes)
	}
	return clean, nil
}
