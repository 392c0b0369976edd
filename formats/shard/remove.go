package shard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// RemoveDataset deletes the forkline dataset in dir, and only it: the
// files a forkline dataset has (manifest.json and its temporary, the
// manifest reserve, tasks sidecars, and in each table directory its
// part-*.parquet shards and their .part-*.parquet.tmp temporaries), then
// the table directories, which must then be empty. dir itself stays.
//
// It first takes the dataset's writer lock, without waiting, and holds it
// while it removes, so that no Writer can start meanwhile; a live Writer
// makes it fail with ErrLocked. It refuses, changing nothing and in this
// order, a directory without a manifest (ErrNoDataset), one that holds
// anything a dataset does not have, in dir or in a table directory
// (ErrForeignFile, naming the first such file), and one whose manifest is
// not a forkline manifest of this schema version (ErrNotForkline):
// forkline never deletes what it did not write.
//
// The manifest is deleted last, so that a crash midway leaves a dataset
// that RemoveDataset still recognises and finishes removing.
func RemoveDataset(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s does not exist", ErrNoDataset, dir)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlockDir(lock)

	name := filepath.Join(dir, ManifestFile)
	if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s has no %s", ErrNoDataset, dir, ManifestFile)
	}
	// Foreign files before the manifest's content: naming the user's file
	// says more than naming the manifest it sits next to.
	entries, err := scanDataset(dir, nil)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.kind == kindForeign {
			return fmt.Errorf("%w: %s", ErrForeignFile, filepath.Join(dir, filepath.FromSlash(e.rel)))
		}
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return fmt.Errorf("%w: %s cannot be read: %w", ErrNotForkline, name, err)
	}
	m, err := decodeManifest(name, data)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotForkline, err)
	}
	if m.Tool != ToolName {
		return fmt.Errorf("%w: %s says tool %q, not %q", ErrNotForkline, name, m.Tool, ToolName)
	}

	// Files in the table directories, then the directories, then the
	// top-level files with the manifest last.
	var tables, top []string
	for _, e := range entries {
		switch {
		case e.kind == kindTableDir:
			tables = append(tables, e.rel)
		case strings.Contains(e.rel, "/"):
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(e.rel))); err != nil {
				return fmt.Errorf("shard: remove dataset: %w", err)
			}
		case e.kind != kindManifest:
			top = append(top, e.rel)
		}
	}
	for _, t := range tables {
		// os.Remove, never RemoveAll: a file that appeared since the scan
		// makes this fail instead of being deleted.
		if err := os.Remove(filepath.Join(dir, t)); err != nil {
			return fmt.Errorf("shard: remove dataset: %w", err)
		}
	}
	slices.Sort(top)
	for _, f := range append(top, ManifestFile) {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("shard: remove dataset: %w", err)
		}
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("shard: remove dataset: %w", err)
	}
	return nil
}
