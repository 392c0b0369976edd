package shard

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/forkline/forkline/schemas"
)

// entryKind is what a file in a dataset directory is to forkline.
type entryKind int

const (
	// kindForeign is anything a forkline dataset does not have: forkline
	// never wrote it, so nothing here deletes it.
	kindForeign entryKind = iota
	kindManifest
	kindTableDir
	// kindPart is a listed shard or the referenced tasks sidecar.
	kindPart
	// kindLeftover is forkline's but not part of the dataset: temporaries,
	// unlisted shards (a generation lost in a crash), unreferenced tasks
	// sidecars.
	kindLeftover
	// kindReserve is the manifest reserve of a live or crashed Writer.
	kindReserve
)

// datasetEntry is one file or directory of a dataset directory.
type datasetEntry struct {
	rel  string // slash-separated, relative to the dataset
	kind entryKind
}

// scanDataset classifies every entry of dir and of its table directories,
// in directory order (tables in schemas.Tables order). With m nil, files
// that would be listed or referenced count as kindPart. Only regular files
// and, for the tables, real directories are forkline's: a symbolic link is
// foreign wherever it is.
func scanDataset(dir string, m *Manifest) ([]datasetEntry, error) {
	var listed map[string]bool
	referenced := ""
	if m != nil {
		listed = map[string]bool{}
		for _, s := range m.Shards {
			listed[s.File] = true
		}
		if m.TasksFile != nil {
			referenced = m.TasksFile.File
		}
	}
	part := func(rel string, isListed bool) entryKind {
		if m == nil || isListed {
			return kindPart
		}
		return kindLeftover
	}
	top, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	var out []datasetEntry
	var tables []string
	for _, e := range top {
		name := e.Name()
		regular := e.Type().IsRegular()
		kind := kindForeign
		switch {
		case slices.Contains(schemas.Tables, name) && e.IsDir():
			kind = kindTableDir
			tables = append(tables, name)
		case !regular:
		case name == ManifestFile:
			kind = kindManifest
		case name == ManifestFile+".tmp", isSidecarName(name, true):
			kind = kindLeftover
		case name == ReserveFile:
			kind = kindReserve
		case isSidecarName(name, false):
			kind = part(name, name == referenced)
		}
		out = append(out, datasetEntry{rel: name, kind: kind})
	}
	slices.SortStableFunc(tables, func(a, b string) int {
		return slices.Index(schemas.Tables, a) - slices.Index(schemas.Tables, b)
	})
	for _, table := range tables {
		entries, err := os.ReadDir(filepath.Join(dir, table))
		if err != nil {
			return nil, fmt.Errorf("shard: %w", err)
		}
		for _, e := range entries {
			rel := table + "/" + e.Name()
			kind := kindForeign
			switch {
			case !e.Type().IsRegular():
			case isShardName(e.Name()):
				kind = part(rel, listed[rel])
			case isShardTmpName(e.Name()):
				kind = kindLeftover
			}
			out = append(out, datasetEntry{rel: rel, kind: kind})
		}
	}
	return out, nil
}
