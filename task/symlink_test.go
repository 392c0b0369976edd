package task

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hostSecret writes a file outside any task folder, standing for the
// host's /etc/shadow: its content must never reach a spec.
func hostSecret(t *testing.T) (path, content string) {
	t.Helper()
	content = "root:HOST-SECRET-" + filepath.Base(t.TempDir()) + ":20228:0:99999:7:::\n"
	path = filepath.Join(t.TempDir(), "shadow")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path, content
}

// writeHarbor writes a minimal Harbor task folder (docker_image, so no
// build) with extra files; a value starting with "->" makes a symlink.
func writeHarbor(t *testing.T, extra map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "a-task")
	files := map[string]string{
		"task.toml":         "[environment]\ndocker_image = \"forkline/debian\"\n",
		"instruction.md":    "Do the thing.",
		"tests/test.sh":     "echo 1 > /logs/verifier/reward.txt\n",
		"solution/solve.sh": "true\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		os.Remove(p)
		if target, ok := strings.CutPrefix(content, "->"); ok {
			require.NoError(t, os.Symlink(target, p))
			continue
		}
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

// TestHarborSymlinksStayInTheFolder: a symlink in any file a Harbor task
// folder holds is refused naming the file when it leads outside the folder
// (and the host file's content is in neither the error nor the spec), and
// followed when it stays inside. Before the fix, tests/shadow ->
// /etc/shadow was uploaded to the sandbox, instruction.md -> /etc/shadow
// became the instruction, and both reached the dataset.
func TestHarborSymlinksStayInTheFolder(t *testing.T) {
	secret, content := hostSecret(t)
	secretDir := filepath.Dir(secret)
	for _, c := range []struct {
		name  string
		files map[string]string
		want  string // in the error; "" when the task loads
	}{
		{"instruction.md", map[string]string{"instruction.md": "->" + secret}, "instruction.md leads outside the task's folder (a symlink, to " + secret},
		{"task.toml", map[string]string{"task.toml": "->" + secret}, "task.toml leads outside the task's folder"},
		{"a test fixture", map[string]string{"tests/shadow": "->" + secret}, "tests/shadow leads outside the task's folder"},
		{"test.sh", map[string]string{"tests/test.sh": "->" + secret}, "tests/test.sh leads outside the task's folder"},
		{"a nested test fixture", map[string]string{"tests/data/deep/shadow": "->" + secret}, "tests/data/deep/shadow leads outside"},
		{"a relative escape", map[string]string{"tests/up": "->../../" + filepath.Base(secretDir) + "/shadow"}, "tests/up leads outside the task's folder"},
		{"a solution file", map[string]string{"solution/shadow": "->" + secret}, "solution/shadow leads outside the task's folder"},
		{"solve.sh", map[string]string{"solution/solve.sh": "->" + secret}, "solution/solve.sh leads outside the task's folder"},
		{"the tests folder", map[string]string{"tests/test.sh": "", "tests": "->" + secretDir}, "leads outside the task's folder"},
		{"a dangling link out", map[string]string{"tests/gone": "->/nonexistent-forkline/x"}, "tests/gone leads outside the task's folder"},
		{"a link inside the folder", map[string]string{"tests/helper.sh": "->../solution/solve.sh"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range c.files {
				// The tests folder made a link is done below, once the
				// folder's files are written (in map order, a link
				// written first met the folder test.sh made: "file exists").
				if v != "" && k != "tests" {
					files[k] = v
				}
			}
			dir := writeHarbor(t, files)
			if c.files["tests/test.sh"] == "" && c.files["tests"] != "" {
				require.NoError(t, os.RemoveAll(filepath.Join(dir, "tests")))
				require.NoError(t, os.Symlink(c.files["tests"][2:], filepath.Join(dir, "tests")))
			}
			s, err := Load(dir)
			if c.want == "" {
				require.NoError(t, err)
				require.Equal(t, "true\n", s[0].Verify.Files["helper.sh"], "a link inside the folder is read")
				return
			}
			require.ErrorIs(t, err, ErrSpec)
			require.ErrorContains(t, err, c.want)
			require.NotContains(t, err.Error(), "HOST-SECRET")
			b, _ := json.Marshal(s)
			require.NotContains(t, string(b), content)
		})
	}
}

// TestHarborBuildContextKeepsItsLinks: a symlink in environment/ is sent
// to the engine as a link (which the engine resolves inside the context),
// never as the host file it points at; the Dockerfile itself may not lead
// out, nor environment/ be a link.
func TestHarborBuildContextKeepsItsLinks(t *testing.T) {
	secret, content := hostSecret(t)
	toml := "[environment]\nbuild_timeout_sec = 60\n"
	t.Run("a link in the context", func(t *testing.T) {
		dir := writeHarbor(t, map[string]string{"task.toml": toml, "environment/Dockerfile": "FROM forkline/debian\nCOPY shadow /shadow\n", "environment/shadow": "->" + secret})
		s, err := Load(dir)
		require.NoError(t, err)
		b, _ := json.Marshal(s)
		require.NotContains(t, string(b), content)
	})
	t.Run("the Dockerfile", func(t *testing.T) {
		dir := writeHarbor(t, map[string]string{"task.toml": toml, "environment/Dockerfile": "->" + secret})
		_, err := Load(dir)
		require.ErrorContains(t, err, "environment/Dockerfile leads outside the task's folder")
		require.NotContains(t, err.Error(), "HOST-SECRET")
	})
	t.Run("environment is a link", func(t *testing.T) {
		outside := filepath.Join(t.TempDir(), "env")
		require.NoError(t, os.MkdirAll(outside, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(outside, "Dockerfile"), []byte("FROM forkline/debian\n"), 0o644))
		dir := writeHarbor(t, map[string]string{"task.toml": toml, "environment": "->" + outside})
		_, err := Load(dir)
		require.ErrorContains(t, err, "a-task/environment: is a symlink: the build context must be a folder of the task itself")
	})
}

// TestYAMLFilesStayBesideTheTask: files: {path: ...}, verify.files and
// build.context of a YAML task are read from inside the task file's
// directory only. Before the fix, {path: ../../etc/shadow} and a symlink
// to it were read into the spec.
func TestYAMLFilesStayBesideTheTask(t *testing.T) {
	secret, content := hostSecret(t)
	dir := t.TempDir()
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "link")))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "ok.txt"), []byte("fine"), 0o644))
	require.NoError(t, os.Symlink("sub/ok.txt", filepath.Join(dir, "inside")))
	up, err := filepath.Rel(dir, secret)
	require.NoError(t, err)
	for _, c := range []struct{ name, yaml, want string }{
		{"a symlink out", "files: {a: {path: link}}\n", "field files.a.path: link leads outside the task's folder (a symlink, to " + secret},
		{"a hidden file", "verify: {cmd: 'true', files: {t.sh: {path: link}}}\n", "link leads outside the task's folder"},
		{"a ../ path", "files: {a: {path: " + up + "}}\n", "leaves the task file's directory"},
		{"a context outside", "build: {context: ..}\n", `field build.context: ".." leaves the task file's directory`},
		{"an absolute context", "build: {context: /etc}\n", `"/etc" leaves the task file's directory`},
		{"a link inside", "files: {a: {path: inside}}\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, "t.yaml")
			require.NoError(t, os.WriteFile(file, []byte("id: t\ninstruction: x\n"+c.yaml), 0o644))
			specs, err := Load(file)
			if c.want == "" {
				require.NoError(t, err)
				require.Equal(t, "fine", specs[0].Files["a"])
				return
			}
			require.ErrorIs(t, err, ErrSpec)
			require.ErrorContains(t, err, c.want)
			require.NotContains(t, err.Error(), "HOST-SECRET")
			b, _ := json.Marshal(specs)
			require.NotContains(t, string(b), content)
		})
	}
}
