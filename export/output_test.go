package export

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/testenv"
)

// treeState maps everything under dir to its content's hash, "dir" or its
// link target: equal states mean no byte changed.
func treeState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			out[rel+"/"] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "-> " + target
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = sha(data)
		}
		return nil
	}))
	return out
}

// An export never writes over its input: an -out that is, contains or lies
// inside an -in, however it is spelled (symbolic links, "..", a bind
// mount), is bad input and leaves every byte of the input and of the
// output's parent as it was.
func TestOutputNeverOverwritesInput(t *testing.T) {
	f := newFixture(t)
	in := f.runA
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(in, link))
	// The kernel resolves stepsLink/.. to the run, not to the link's own
	// directory: a lexical clean would get this wrong.
	stepsLink := filepath.Join(t.TempDir(), "steps-link")
	require.NoError(t, os.Symlink(filepath.Join(in, "steps"), stepsLink))
	cases := []struct {
		name string
		o    Options
	}{
		{"hf over the run with -force", Options{Target: "hf", Out: in, Force: true}},
		{"jsonl over the manifest", Options{Target: "jsonl", Out: filepath.Join(in, "manifest.json")}},
		{"jsonl over the manifest with -force", Options{Target: "jsonl", Out: filepath.Join(in, "manifest.json"), Force: true}},
		{"a directory inside the run", Options{Target: "chat-jsonl", Out: filepath.Join(in, "exports", "chat")}},
		{"a file inside a table directory", Options{Target: "jsonl", Out: filepath.Join(in, "steps", "all.jsonl")}},
		{"the directory holding the run", Options{Target: "verl-sft", Out: f.dir, Force: true}},
		{"through a symbolic link", Options{Target: "hf", Out: link, Force: true}},
		{"inside, through a symbolic link", Options{Target: "jsonl", Out: filepath.Join(link, "manifest.json"), Force: true}},
		{"through ..", Options{Target: "hf", Out: in + "/steps/../x/..", Force: true}},
		{".. after a symbolic link", Options{Target: "jsonl", Out: stepsLink + "/../manifest.json", Force: true}},
		{"a relative path", Options{Target: "jsonl", Out: relTo(t, filepath.Join(in, "episodes", "e.jsonl"))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := treeState(t, f.dir)
			o := tc.o
			o.Inputs = []string{f.runB, in}
			exportBad(t, o, "is, contains or lies inside Inputs ")
			assert.Equal(t, before, treeState(t, f.dir), "a refused export changed files")
		})
	}

	t.Run("a bind mount of the run", func(t *testing.T) {
		mnt := filepath.Join(t.TempDir(), "mnt")
		require.NoError(t, os.Mkdir(mnt, 0o755))
		testenv.Need(t, testenv.Overlay, func() error {
			if err := syscall.Mount(in, mnt, "", syscall.MS_BIND, ""); err != nil {
				return fmt.Errorf("bind mount: %w", err)
			}
			return nil
		})
		defer syscall.Unmount(mnt, syscall.MNT_DETACH)
		before := treeState(t, f.dir)
		exportBad(t, Options{Inputs: []string{in}, Target: "hf", Out: mnt, Force: true}, "lies inside Inputs")
		exportBad(t, Options{Inputs: []string{in}, Target: "jsonl", Out: filepath.Join(mnt, "manifest.json"), Force: true}, "lies inside Inputs")
		assert.Equal(t, before, treeState(t, f.dir))
	})
}

// relTo returns path relative to the working directory.
func relTo(t *testing.T, path string) string {
	wd, err := os.Getwd()
	require.NoError(t, err)
	rel, err := filepath.Rel(wd, path)
	require.NoError(t, err)
	return rel
}

// -force replaces an earlier export's output only, and only while it is
// as export left it; a jsonl file is never overwritten without -force, nor
// one export did not write with it.
func TestForceReplacesOnlyAnEarlierExport(t *testing.T) {
	f := newFixture(t)
	in := []string{f.runB}
	write := func(path, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	refused := func(t *testing.T, o Options, msg string) {
		t.Helper()
		parent := filepath.Dir(filepath.Clean(o.Out))
		before := treeState(t, parent)
		exportBad(t, o, msg)
		assert.Equal(t, before, treeState(t, parent), "a refused export changed files")
	}

	t.Run("a foreign directory", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "data")
		write(filepath.Join(out, "train.parquet"), "the user's own parquet")
		write(filepath.Join(out, "notes.md"), "precious")
		refused(t, Options{Inputs: in, Target: "verl-sft", Out: out, Force: true}, "Force replaces only an earlier export's output")
	})
	t.Run("an earlier export the user added to", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "hf")
		exportOK(t, Options{Inputs: in, Target: "hf", Out: out})
		exportOK(t, Options{Inputs: in, Target: "hf", Out: out, Force: true}) // unchanged: replaced
		write(filepath.Join(out, "data", "extra.parquet"), "the user's")
		refused(t, Options{Inputs: in, Target: "hf", Out: out, Force: true}, "changed since forkline exported it")
	})
	t.Run("an earlier export of another target", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		exportOK(t, Options{Inputs: in, Target: "chat-jsonl", Out: out})
		exportOK(t, Options{Inputs: in, Target: "verl-sft", Out: out, Force: true})
		assert.Equal(t, []string{"train.parquet"}, files(t, out))
	})
	t.Run("jsonl over an existing file", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "notes.jsonl")
		write(out, "the user's notes\n")
		refused(t, Options{Inputs: in, Target: "jsonl", Out: out}, "exists; choose another file or pass Force")
		refused(t, Options{Inputs: in, Target: "jsonl", Out: out, Force: true}, "Force replaces only an earlier export's output")
	})
	t.Run("jsonl over an earlier jsonl export", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "run.jsonl")
		exportOK(t, Options{Inputs: in, Target: "jsonl", Out: out})
		refused(t, Options{Inputs: in, Target: "jsonl", Out: out}, "pass Force")
		exportOK(t, Options{Inputs: []string{f.runA}, Target: "jsonl", Out: out, Force: true})
		assert.Equal(t, []string{"run.jsonl"}, dirNames(t, filepath.Dir(out)))
		require.NoError(t, os.Truncate(out, 10))
		refused(t, Options{Inputs: in, Target: "jsonl", Out: out, Force: true}, "changed since forkline exported it")
	})
	t.Run("a symbolic link", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(dir, "real")
		exportOK(t, Options{Inputs: in, Target: "hf", Out: target})
		link := filepath.Join(dir, "link")
		require.NoError(t, os.Symlink(target, link))
		refused(t, Options{Inputs: in, Target: "hf", Out: link, Force: true}, "is a symbolic link")
	})
}

// Staging left by killed exports is deleted by the next export into the
// same directory; a live export's staging, and anything without export's
// mark, is left alone.
func TestStaleStagingIsSwept(t *testing.T) {
	f := newFixture(t)
	parent := t.TempDir()
	stale := func(name string, m outputMark) string {
		p := filepath.Join(parent, name)
		require.NoError(t, os.MkdirAll(filepath.Join(p, "data"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(p, "data", "half.parquet"), []byte("half"), 0o644))
		require.NoError(t, setMark(p, m))
		return p
	}
	staging := outputMark{Tool: markTool, Target: "hf", State: markStaging}
	killed := stale(".hf.tmp-123", staging)
	killedReplace := stale(".hf.tmp-456.old", outputMark{Tool: markTool, Target: "hf", State: markDone, Tree: "x"})
	live := stale(".hf.tmp-789", staging)
	liveLock, err := os.Open(live)
	require.NoError(t, err)
	defer liveLock.Close()
	require.NoError(t, lockNB(liveLock))
	killedFile := filepath.Join(parent, ".run.jsonl.42.tmp")
	require.NoError(t, os.WriteFile(killedFile, []byte(`{"half":`), 0o644))
	require.NoError(t, setMark(killedFile, outputMark{Tool: markTool, Target: "jsonl", State: markStaging}))
	unmarked := filepath.Join(parent, ".mine.tmp-1")
	require.NoError(t, os.MkdirAll(unmarked, 0o755))
	othersMark := filepath.Join(parent, ".theirs.tmp-2")
	require.NoError(t, os.MkdirAll(othersMark, 0o755))
	require.NoError(t, setMark(othersMark, outputMark{Tool: "someone else", State: markStaging}))

	exportOK(t, Options{Inputs: []string{f.runB}, Target: "verl-sft", Out: filepath.Join(parent, "verl")})
	assert.NoDirExists(t, killed)
	assert.NoDirExists(t, killedReplace)
	assert.NoFileExists(t, killedFile)
	assert.DirExists(t, live, "a live export's staging stays")
	assert.DirExists(t, unmarked, "an unmarked directory is never touched")
	assert.DirExists(t, othersMark)
	assert.ElementsMatch(t, []string{"verl", ".hf.tmp-789", ".mine.tmp-1", ".theirs.tmp-2"}, dirNames(t, parent))

	// A jsonl export sweeps too.
	k2 := stale(".x.tmp-7", staging)
	exportOK(t, Options{Inputs: []string{f.runB}, Target: "jsonl", Out: filepath.Join(parent, "all.jsonl")})
	assert.NoDirExists(t, k2)
}
