package task

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

// files: and verify.files by path, binary included; build:, network:,
// metadata:.
func TestSpecExtensions(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"fixtures/notes.txt": "text\n",
		"fixtures/blob.bin":  "\x00\xff\xfe binary",
		"hidden/test.sh":     "sh check.sh\n",
		"img/Dockerfile":     "FROM forkline/busybox\n",
		"img/Dockerfile.dev": "FROM forkline/busybox\n",
		"img/app/main.sh":    "echo hi\n",
		"task.yaml":          "",
	})
	require.NoError(t, os.Chmod(filepath.Join(dir, "hidden/test.sh"), 0o755))
	yaml := `id: ext
instruction: do it
build: {context: img, dockerfile: Dockerfile.dev, args: {V: "1"}, target: final, timeout: 5m}
files:
  notes.txt: {path: fixtures/notes.txt}
  data/blob.bin: {path: fixtures/blob.bin}
  inline.txt: inline
network: {setup: host}
metadata: {suite: demo, level: 2, tags: [a, b], when: 2026-01-02}
verify:
  cmd: sh test.sh
  files:
    test.sh: {path: hidden/test.sh}
    check.sh: "exit 0"
`
	file := filepath.Join(dir, "task.yaml")
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o644))
	specs, err := Load(file)
	require.NoError(t, err)
	s := specs[0]
	require.Equal(t, map[string]string{"notes.txt": "text\n", "inline.txt": "inline"}, s.Files)
	require.Equal(t, map[string][]byte{"data/blob.bin": []byte("\x00\xff\xfe binary")}, s.BinaryFiles)
	require.Equal(t, filepath.Join(dir, "img"), s.Build.Context)
	require.Equal(t, "Dockerfile.dev", s.Build.Dockerfile)
	require.Equal(t, map[string]string{"V": "1"}, s.Build.Args)
	require.Equal(t, "final", s.Build.Target)
	require.Len(t, s.Build.ContextDigest, 64)
	require.Equal(t, &Network{Episode: NetworkNone, Setup: "host"}, s.Network)
	require.JSONEq(t, `{"level":2,"suite":"demo","tags":["a","b"],"when":"2026-01-02T00:00:00Z"}`, string(s.Metadata))
	require.Equal(t, map[string]string{"test.sh": "sh check.sh\n", "check.sh": "exit 0"}, s.Verify.Files)
	require.Equal(t, []string{"test.sh"}, s.Verify.Executable, "the source file's exec bit is kept")
	require.Empty(t, s.Verify.Dir, "YAML tasks' hidden files go to the workspace")

	// The records read back, binary content and metadata included, with
	// the same hash.
	raw, err := EncodeRecords(specs)
	require.NoError(t, err)
	back, err := DecodeRecords(raw)
	require.NoError(t, err)
	require.Equal(t, s.Hash(), back["ext"].Hash())
	require.Equal(t, s.BinaryFiles, back["ext"].BinaryFiles)

	// A changed build context or hidden file changes the hash.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "img/app/main.sh"), []byte("echo bye\n"), 0o644))
	again, err := Load(file)
	require.NoError(t, err)
	require.NotEqual(t, s.Hash(), again[0].Hash(), "the build context is part of the hash")

	// A spec without the new sections hashes as before them (spec_test's
	// golden hashes keep that); network: none given explicitly is recorded.
	plain, err := Parse("p.yaml", []byte("id: p\ninstruction: x\nnetwork: none\n"))
	require.NoError(t, err)
	require.Equal(t, &Network{Episode: NetworkNone}, plain[0].Network)
}

func TestSpecExtensionRefusals(t *testing.T) {
	dir := writeFiles(t, map[string]string{"img/Dockerfile": "FROM x\n", "img/.dockerignore": "x\n", "ok/Dockerfile": "FROM x\n", "big.bin": ""})
	f, err := os.Create(filepath.Join(dir, "big.bin"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxFileBytes+1))
	f.Close()
	for _, c := range []struct{ name, yaml, want string }{
		{"image and build", "image: a\nbuild: {context: ok}\n", "field build: a task gives image or build, not both"},
		{"no context", "build: {dockerfile: D}\n", "field build.context: missing"},
		{"context not a dir", "build: {context: nope}\n", "nope is not a directory"},
		{"dockerfile missing", "build: {context: ok, dockerfile: Other}\n", "field build.dockerfile:"},
		{"dockerignore", "build: {context: img}\n", "has a .dockerignore, which forkline does not apply"},
		{"bad arg name", "build: {context: ok, args: {1X: a}}\n", `field build.args.1X: "1X" is not a build argument name`},
		{"file path missing", "files: {a: {path: none.txt}}\n", "field files.a.path:"},
		{"file path a dir", "files: {a: {path: ok}}\n", "is a directory; name each of its files"},
		{"file too big", "files: {a: {path: big.bin}}\n", "build large files into the image"},
		{"file ref unknown key", "files: {a: {file: x}}\n", `field files.a.file: unknown field (known: path)`},
		{"absolute file path", "files: {a: {path: /etc/passwd}}\n", "must be a path relative to the task file's directory"},
		{"network name", "network: {episode: 'no net'}\n", `field network.episode: "no net" is not a network mode name`},
		{"network unknown key", "network: {agent: none}\n", "field network.agent: unknown field (known: episode, setup)"},
		{"metadata not a mapping", "metadata: [a]\n", "field metadata: must be a mapping"},
		{"metadata with a NaN", "metadata: {x: .nan}\n", "metadata.x: NaN has no JSON form"},
		{"verify files escape", "verify: {cmd: x, files: {../t.sh: a}}\n", `field verify.files.../t.sh: the path has a ".." segment`},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, "t.yaml")
			require.NoError(t, os.WriteFile(file, []byte("id: t\ninstruction: x\n"+c.yaml), 0o644))
			_, err := Load(file)
			require.ErrorIs(t, err, ErrSpec)
			require.ErrorContains(t, err, c.want)
		})
	}
}
