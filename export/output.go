package export

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// writeDirTarget builds the output in a hidden sibling directory and moves
// it to o.Out only when every file is complete, so a failed or interrupted
// export leaves no directory that looks finished. Out must not exist, be an
// empty directory, or (with Force) is replaced.
func writeDirTarget(o Options, build func(dir string) error) error {
	out := filepath.Clean(o.Out) // checked by checkOut before the export began
	parent := filepath.Dir(out)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	stage, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := os.Chmod(stage, 0o755); err != nil {
		os.RemoveAll(stage)
		return fmt.Errorf("export: %w", err)
	}
	if err := build(stage); err != nil {
		os.RemoveAll(stage)
		return err
	}
	if err := syncTree(stage); err != nil {
		os.RemoveAll(stage)
		return fmt.Errorf("export: %w", err)
	}
	var old string
	if _, err := os.Stat(out); err == nil {
		old = stage + ".old"
		if err := os.Rename(out, old); err != nil {
			os.RemoveAll(stage)
			return fmt.Errorf("export: %w", err)
		}
	}
	if err := os.Rename(stage, out); err != nil {
		if old != "" {
			os.Rename(old, out)
		}
		os.RemoveAll(stage)
		return fmt.Errorf("export: %w", err)
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
	tmp, err := os.CreateTemp(filepath.Dir(o.Out), "."+filepath.Base(o.Out)+".*.tmp")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = build(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if err = os.Chmod(tmp.Name(), 0o644); err == nil {
			err = os.Rename(tmp.Name(), o.Out)
		}
	}
	return err
}

// checkOut refuses to replace existing output unless forced: a directory
// target may go to a missing or empty directory, a file target to a missing
// file (the jsonl target has always replaced its file; it still does).
func checkOut(out string, force, dir bool) error {
	st, err := os.Stat(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if !dir {
		if st.IsDir() {
			return bad("export: -out %s is a directory; -to jsonl writes a file", out)
		}
		return nil
	}
	if !st.IsDir() {
		return bad("export: -out %s exists and is not a directory", out)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if len(entries) > 0 && !force {
		return bad("export: -out %s is not empty; choose another directory or pass -force to replace it", out)
	}
	return nil
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
