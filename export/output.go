package export

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/forkline/forkline/fielderr"
)

// How export keeps its hands off what it did not write.
//
//   - -out may not be, contain or lie inside an -in (paths compared after
//     resolving symbolic links and "..", and by file identity, so a bind
//     mount is caught too): an export never writes over its input.
//   - An existing -out is replaced only with -force, and only when it is an
//     earlier export's output, unchanged since (or, for a directory target,
//     an empty directory). Export recognises its own output by a mark: the
//     extended attribute user.forkline.export, set on the output directory
//     (or the jsonl file) before it is renamed into place, recording the
//     target and a digest of the names, kinds and sizes of what it wrote.
//     Decision: an attribute, not a marker file, so that the output holds
//     exactly the files a trainer or the Hub expects (and the golden layouts
//     stay what they are). The cost: a copy that drops extended attributes
//     (cp without --preserve=xattr, a filesystem without user attributes)
//     is no longer recognised, and -force refuses it; delete it yourself.
//   - The output is built under a hidden name next to -out (a staging
//     directory ".<name>.tmp-NNN", or for jsonl ".<name>.NNN.tmp"), marked
//     as staging and held under an exclusive flock while the export runs.
//     A killed export leaves it behind; the next export into the same
//     parent directory deletes every such entry that carries the mark and
//     that no live export holds locked. Entries without the mark are never
//     touched; so a kill in the microseconds between creating the staging
//     directory and marking it leaves an empty hidden directory behind.

// markAttr is the extended attribute that marks export's output.
const markAttr = "user.forkline.export"

// markTool is the mark's tool field: what tells the attribute is ours.
const markTool = "forkline export"

// Mark states.
const (
	markStaging = "staging" // being built; stale if no export holds it locked
	markDone    = "done"    // a finished output
)

// outputMark is the value of markAttr, JSON-encoded.
type outputMark struct {
	Tool   string `json:"tool"`
	Target string `json:"target"`
	State  string `json:"state"`
	Tree   string `json:"tree,omitempty"` // treeDigest of the output when it was finished
}

// errMarksUnsupported is returned by setMark where extended attributes are
// not available.
var errMarksUnsupported = errors.New("extended attributes are not supported here")

// errExchangeUnsupported is returned by exchange where two paths cannot be
// swapped atomically.
var errExchangeUnsupported = errors.New("atomic exchange is not supported here")

// readMark returns path's mark if it carries one of export's.
func readMark(path string) (outputMark, bool) {
	m, err := getMark(path)
	if err != nil || m.Tool != markTool {
		return outputMark{}, false
	}
	return m, true
}

// stagingNames match what writeDirTarget and writeFileTarget create in the
// output's parent: ".<name>.tmp-NNN", ".<name>.tmp-NNN.old" (a replaced
// output being deleted) and ".<name>.NNN.tmp".
var stagingNames = regexp.MustCompile(`^\..+(\.tmp-[0-9]+(\.old)?|\.[0-9]+\.tmp)$`)

// sweepStaging deletes what killed exports left in parent: entries named
// like a staging directory or file that carry export's mark and that no
// live export holds locked. It is best effort; an entry it cannot lock or
// delete stays for a later export.
func sweepStaging(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !stagingNames.MatchString(e.Name()) || e.Type()&fs.ModeSymlink != 0 {
			continue
		}
		path := filepath.Join(parent, e.Name())
		if _, ok := readMark(path); !ok {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if lockNB(f) == nil { // no live export holds it
			os.RemoveAll(path)
		}
		f.Close() // releases the lock
	}
}

// checkOut refuses, before anything is read or written, an -out that would
// destroy an input or replace what export may not replace. See the top of
// this file.
func checkOut(o Options, dirTarget bool) error {
	if o.Out == "-" {
		return nil
	}
	out, err := resolvePath(o.Out)
	if err != nil {
		return fielderr.New("export", "Out", o.Out, err)
	}
	for _, in := range o.Inputs {
		if err := checkApart(out, o.Out, in); err != nil {
			return err
		}
	}
	return checkReplaceable(filepath.Clean(o.Out), o.Force, dirTarget)
}

// checkApart refuses an output path that is, contains or lies inside the
// input in. out is the resolved output path; outArg and in are as given.
func checkApart(out, outArg, in string) error {
	refuse := func() error {
		return badField(fielderr.Sentence("export", "Out", outArg, "is, contains or lies inside Inputs %s; an export must not write over its input", in).Mentions("Inputs"))
	}
	rin, err := resolvePath(in)
	if err != nil {
		return nil // openInputs reports an input it cannot open
	}
	if out == rin || strings.HasPrefix(out, rin+string(filepath.Separator)) || strings.HasPrefix(rin, out+string(filepath.Separator)) {
		return refuse()
	}
	// The same directory under another name (a bind mount): compare
	// identities along both paths.
	inInfo, err := os.Stat(rin)
	if err != nil {
		return nil
	}
	for p := out; ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && os.SameFile(fi, inInfo) {
			return refuse()
		}
		if p == filepath.Dir(p) {
			break
		}
	}
	if outInfo, err := os.Stat(out); err == nil {
		for p := rin; ; p = filepath.Dir(p) {
			if fi, err := os.Stat(p); err == nil && os.SameFile(fi, outInfo) {
				return refuse()
			}
			if p == filepath.Dir(p) {
				break
			}
		}
	}
	return nil
}

// resolvePath returns the absolute path p names, with every symbolic link
// and ".." resolved the way the kernel resolves them (a ".." after a link
// goes to the parent of the link's target). The part of p that does not
// exist yet is appended as written, cleaned: it holds no link.
func resolvePath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		p = wd + string(filepath.Separator) + p
	}
	resolved := string(filepath.Separator)
	parts := strings.Split(p, string(filepath.Separator))
	for i, part := range parts {
		switch part {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, part)
		fi, err := os.Lstat(next)
		if err != nil {
			// Missing (or not reachable): the rest is created as written.
			return filepath.Join(append([]string{resolved}, parts[i:]...)...), nil
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if next, err = filepath.EvalSymlinks(next); err != nil {
				return filepath.Join(append([]string{resolved}, parts[i:]...)...), nil
			}
		}
		resolved = next
	}
	return resolved, nil
}

// checkReplaceable refuses an existing out unless it may be replaced: a
// directory target may go to a missing or empty directory, or with force to
// an earlier export's output; a file target to a missing file, or with
// force to an earlier jsonl export's file.
func checkReplaceable(out string, force, dirTarget bool) error {
	st, err := os.Lstat(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return badField(fielderr.Sentence("export", "Out", out, "is a symbolic link; give the path it points to"))
	}
	if !dirTarget {
		switch {
		case st.IsDir():
			return badField(fielderr.Sentence("export", "Out", out, "is a directory; Target jsonl writes a file").Mentions("Target"))
		case !st.Mode().IsRegular():
			return badField(fielderr.Sentence("export", "Out", out, "exists and is not a regular file"))
		case !force:
			return badField(fielderr.Sentence("export", "Out", out, "exists; choose another file or pass Force to replace an earlier export").Mentions("Force"))
		}
		return ownOutput(out)
	}
	if !st.IsDir() {
		return badField(fielderr.Sentence("export", "Out", out, "exists and is not a directory"))
	}
	empty, err := isEmptyDir(out)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	switch {
	case empty:
		return nil
	case !force:
		return badField(fielderr.Sentence("export", "Out", out, "is not empty; choose another directory or pass Force to replace an earlier export").Mentions("Force"))
	}
	return ownOutput(out)
}

// ownOutput refuses to replace out unless it carries export's finished mark
// and is unchanged since: the same names, kinds and sizes.
func ownOutput(out string) error {
	m, ok := readMark(out)
	if !ok || m.State != markDone {
		return badField(fielderr.Sentence("export", "Force", "", "replaces only an earlier export's output, and %s is not one (export marks its output with the extended attribute %s); remove it yourself if it should go", out, markAttr))
	}
	tree, err := treeDigest(out)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if tree != m.Tree {
		return badField(fielderr.Sentence("export", "Force", "", "refuses to replace %s: it changed since forkline exported it (files added, removed or resized); remove it yourself if it should go", out))
	}
	return nil
}

func isEmptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

// treeDigest hashes the listing of root: every entry's relative path,
// kind and, for files, size, in lexical order. It changes when a file is
// added, removed, renamed or resized, which is what -force must notice; it
// does not read file contents.
func treeDigest(root string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			fmt.Fprintf(h, "d %q\n", rel)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "f %q %d\n", rel, fi.Size())
		default:
			fmt.Fprintf(h, "o %q %v\n", rel, d.Type())
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeDirTarget builds the output in a hidden sibling directory and moves
// it to o.Out only when every file is complete, so a failed or interrupted
// export leaves no directory that looks finished. checkOut has allowed Out;
// it is checked again under lock right before it is replaced.
func writeDirTarget(o Options, build func(dir string) error) error {
	out := filepath.Clean(o.Out)
	parent := filepath.Dir(out)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	sweepStaging(parent)
	stage, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	// Lock, then mark: a sweep that sees the mark always finds the lock.
	stageLock, err := os.Open(stage)
	if err == nil {
		err = lockNB(stageLock)
	}
	if err != nil {
		os.RemoveAll(stage)
		return fmt.Errorf("export: lock %s: %w", stage, err)
	}
	defer stageLock.Close()
	fail := func(err error) error {
		os.RemoveAll(stage)
		return err
	}
	if err := setMarkIfSupported(stage, outputMark{Tool: markTool, Target: o.Target, State: markStaging}); err != nil {
		return fail(fmt.Errorf("export: mark %s: %w", stage, err))
	}
	if err := os.Chmod(stage, 0o755); err != nil {
		return fail(fmt.Errorf("export: %w", err))
	}
	if err := build(stage); err != nil {
		return fail(err)
	}
	if err := syncTree(stage); err != nil {
		return fail(fmt.Errorf("export: %w", err))
	}
	tree, err := treeDigest(stage)
	if err != nil {
		return fail(fmt.Errorf("export: %w", err))
	}
	if err := setMarkIfSupported(stage, outputMark{Tool: markTool, Target: o.Target, State: markDone, Tree: tree}); err != nil {
		return fail(fmt.Errorf("export: mark %s: %w", stage, err))
	}

	// Make room at out: an empty directory is removed (os.Remove fails if
	// a file appeared meanwhile); an earlier export is moved aside, locked
	// so that no sweep takes it while it is still the fallback.
	var old string
	var oldLock *os.File
	if _, err := os.Lstat(out); err == nil {
		if err := checkReplaceable(out, o.Force, true); err != nil {
			return fail(err)
		}
		if empty, _ := isEmptyDir(out); empty {
			if err := os.Remove(out); err != nil {
				return fail(fmt.Errorf("export: %w", err))
			}
		} else {
			if oldLock, err = os.Open(out); err == nil {
				err = lockNB(oldLock)
			}
			if err != nil {
				if oldLock != nil {
					oldLock.Close()
				}
				return fail(fielderr.Sentence("export", "Out", out, "is being replaced by another export: %w", err))
			}
			defer oldLock.Close()
			// Swap atomically where the filesystem can: out is never
			// missing, and the earlier export ends up at stage.
			switch err := exchange(stage, out); {
			case err == nil:
				os.RemoveAll(stage)
				return syncDir(parent)
			case !errors.Is(err, errExchangeUnsupported):
				return fail(fmt.Errorf("export: %w", err))
			}
			old = stage + ".old"
			if err := os.Rename(out, old); err != nil {
				return fail(fmt.Errorf("export: %w", err))
			}
		}
	}
	if err := os.Rename(stage, out); err != nil {
		if old != "" {
			os.Rename(old, out)
		}
		return fail(fmt.Errorf("export: %w", err))
	}
	if old != "" {
		os.RemoveAll(old)
	}
	return syncDir(parent)
}

// writeFileTarget writes a one-file target to a temporary name and renames
// it, or streams it to o.Stdout for Out "-".
func writeFileTarget(o Options, build func(w io.Writer) error) error {
	if o.Out == "-" {
		return build(o.Stdout)
	}
	sweepStaging(filepath.Dir(o.Out))
	tmp, err := os.CreateTemp(filepath.Dir(o.Out), "."+filepath.Base(o.Out)+".*.tmp")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := lockNB(tmp); err != nil {
		return fmt.Errorf("export: lock %s: %w", tmp.Name(), err)
	}
	if err := setMarkIfSupported(tmp.Name(), outputMark{Tool: markTool, Target: o.Target, State: markStaging}); err != nil {
		return fmt.Errorf("export: mark %s: %w", tmp.Name(), err)
	}
	err = build(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	var tree string
	if err == nil {
		tree, err = treeDigest(tmp.Name())
	}
	if err == nil {
		err = setMarkIfSupported(tmp.Name(), outputMark{Tool: markTool, Target: o.Target, State: markDone, Tree: tree})
	}
	if err == nil {
		// Checked again right before it is replaced.
		err = checkReplaceable(filepath.Clean(o.Out), o.Force, false)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), o.Out)
	}
	return err
}

// setMarkIfSupported marks path, or does nothing where the filesystem
// cannot keep the mark: the export still works, but a later -force will
// not recognise it and a killed export's leftovers are not swept.
func setMarkIfSupported(path string, m outputMark) error {
	err := setMark(path, m)
	if errors.Is(err, errMarksUnsupported) {
		return nil
	}
	return err
}

// syncTree fsyncs every directory under root (the files were synced when
// closed), so the renamed tree is durable.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return syncDir(p)
		}
		return nil
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
