package gvisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/docker"
	"github.com/forkline/forkline/runtime"
)

// needImage skips (or fails, under FORKLINE_REQUIRE) unless a Docker engine
// answers with image ref on it.
func needImage(t *testing.T, component, ref string) {
	t.Helper()
	testenv.NeedDockerImage(t, component, ref)
}

// The default rootfs is forkline/busybox's files, exported through the
// Docker engine once into the cache (a second provider reuses them);
// forkline/debian's work the same, with bash; a spec's Build is built on
// the engine and its WORKDIR is the workspace.
func TestImages(t *testing.T) {
	needRunsc(t)
	needImage(t, "docker", docker.ImageBusybox)
	dir := t.TempDir()
	openIn := func(params map[string]string) *Provider {
		p, err := New(t.Context(), providers.Options{Dir: dir, Params: params})
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close(context.Background()) })
		return p
	}
	p := openIn(nil)
	var progress strings.Builder
	require.NoError(t, p.Prepare(t.Context(), []providers.Spec{{}}, &progress))
	require.Contains(t, progress.String(), "gvisor: exported the files of forkline/busybox")
	sb := create(t, p, providers.Spec{Files: map[string][]byte{"a.txt": []byte("a")}})
	require.Equal(t, "/workspace", sb.Info().Workspace)
	require.Equal(t, "a\n/workspace\n", sh(t, sb, "cat a.txt; echo; pwd").Text())
	cached, err := os.ReadDir(filepath.Join(dir, rootfsCacheName))
	require.NoError(t, err)
	require.Len(t, cached, 1, "one image, one cached rootfs")

	progress.Reset()
	q := openIn(nil)
	require.NoError(t, q.Prepare(t.Context(), []providers.Spec{{}}, &progress))
	require.NotContains(t, progress.String(), "exported", "a second provider reuses the cached files")

	t.Run("debian", func(t *testing.T) {
		needImage(t, "docker-debian", docker.ImageDebian)
		sb := create(t, p, providers.Spec{Image: docker.ImageDebian})
		obs := sh(t, sb, `bash -c 'echo "bash $BASH_VERSINFO"; . /etc/os-release; echo $VERSION_CODENAME'`)
		require.Equal(t, 0, obs.ExitCode, obs.Text())
		require.Equal(t, "bash 5\nbookworm\n", obs.Text())
	})
	t.Run("build", func(t *testing.T) {
		ctxDir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(ctxDir, "Dockerfile"),
			[]byte("FROM forkline/busybox\nRUN mkdir -p /app && echo built > /app/made.txt\nWORKDIR /app\nENV FROM_IMAGE=yes\n"), 0o644))
		spec := providers.Spec{Build: &providers.Build{Context: ctxDir}}
		require.NoError(t, p.Prepare(t.Context(), []providers.Spec{spec}, nil))
		sb := create(t, p, spec)
		require.Equal(t, "/app", sb.Info().Workspace, "the image's WORKDIR is the workspace")
		require.Equal(t, "built\nyes\n/app\n", sh(t, sb, `cat made.txt; echo "$FROM_IMAGE"; pwd`).Text())
		obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActReadFile, Path: "/app/made.txt"})
		require.NoError(t, err)
		require.Equal(t, "built\n", obs.Text())
	})
	t.Run("missing", func(t *testing.T) {
		err := p.Prepare(t.Context(), []providers.Spec{{Image: "forkline/no-such-image-4242"}}, nil)
		require.ErrorIs(t, err, providers.ErrCannotPrepare)
		require.ErrorContains(t, err, "forkline/no-such-image-4242")
	})
}

// treeSum is a digest of a directory tree: every entry's path, mode, size,
// owner, modification time, link target and content.
func treeSum(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(dir, p)
		h.Write([]byte(rel + "\x00" + info.Mode().String() + "\x00" + strconv.FormatInt(info.Size(), 10) + "\x00" +
			strconv.Itoa(int(st.Uid)) + ":" + strconv.Itoa(int(st.Gid)) + "\x00" + info.ModTime().String() + "\x00"))
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			h.Write([]byte(target))
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	}))
	return hex.EncodeToString(h.Sum(nil))
}

// A sandbox that rewrites, deletes and adds files all over its root
// filesystem — and its forks and their checkpoints — changes nothing in
// the directory it started from: the changes live in the sandbox's memory.
func TestRootfsUntouched(t *testing.T) {
	needRunsc(t)
	rootfs := busyboxRootfs(t)
	before := treeSum(t, rootfs)
	p := open(t, map[string]string{ParamRootfs: rootfs})
	sb := create(t, p, providers.Spec{Files: map[string][]byte{"w.txt": []byte("w")}})
	sh(t, sb, "echo changed > /etc/passwd && rm /etc/group && mkdir -p /opt/new && echo x > /opt/new/f && chmod 700 /tmp && rm /bin/ls && touch /bin/sh")
	cp, err := p.Checkpoint(t.Context(), sb, "untouched")
	require.NoError(t, err)
	f, err := p.Fork(t.Context(), cp)
	require.NoError(t, err)
	require.Equal(t, "changed\n", sh(t, f, "cat /etc/passwd").Text())
	sh(t, f, "rm -rf /etc && echo y > /workspace/w.txt")
	require.NoError(t, f.Close(t.Context()))
	require.NoError(t, p.Close(t.Context()))
	require.Equal(t, before, treeSum(t, rootfs), "the rootfs directory is byte-identical")
}
