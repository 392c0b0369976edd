package shard

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// TasksInlineMax is the largest Manifest.Tasks (encoded JSON bytes) stored
// inside manifest.json. Longer task specs (a suite of thousands of tasks,
// or tasks embedding their files) go to a content-addressed sidecar file,
// "tasks-<sha256>.json", written once, so that the manifest rewritten at
// every generation close stays small. Decision: a threshold rather than
// always a sidecar, so that the manifest of an ordinary run stays one
// self-contained file for people reading it with jq or DuckDB; 64 KiB is
// far above a handful of task specs and far below what costs anything to
// rewrite once a minute.
const TasksInlineMax = 64 << 10

// SidecarInfo names a sidecar file of the dataset and what it must hash to.
type SidecarInfo struct {
	File   string `json:"file"` // in the dataset directory: "tasks-<sha256>.json"
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"` // hex; also in the file name
}

const (
	sidecarPrefix = "tasks-"
	sidecarSuffix = ".json"
)

func sidecarName(sum string) string { return sidecarPrefix + sum + sidecarSuffix }

// isSidecarName reports whether name is a tasks sidecar's file name (or its
// temporary, with tmp).
func isSidecarName(name string, tmp bool) bool {
	if tmp {
		if !strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".tmp") {
			return false
		}
		name = strings.TrimSuffix(strings.TrimPrefix(name, "."), ".tmp")
	}
	sum, ok := strings.CutPrefix(name, sidecarPrefix)
	if !ok {
		return false
	}
	sum, ok = strings.CutSuffix(sum, sidecarSuffix)
	return ok && isHexSHA256(sum)
}

func isHexSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// check rejects a reference that could name a file outside the dataset
// directory or disagrees with itself.
func (s SidecarInfo) check() error {
	if !isSidecarName(s.File, false) {
		return fmt.Errorf("tasks_file %q is not a tasks sidecar name (tasks-<sha256>.json)", s.File)
	}
	if s.File != sidecarName(s.SHA256) {
		return fmt.Errorf("tasks_file %q does not carry its sha256 %s", s.File, s.SHA256)
	}
	if s.Bytes < 0 {
		return fmt.Errorf("tasks_file %q has %d bytes", s.File, s.Bytes)
	}
	return nil
}

// readSidecar reads a sidecar and checks its size and sha256 (ErrCorrupt
// naming the file otherwise). It never reads more than the recorded size.
func readSidecar(dir string, s SidecarInfo) ([]byte, error) {
	path := filepath.Join(dir, s.File)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: tasks sidecar %s: %w", ErrCorrupt, path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, s.Bytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: tasks sidecar %s: %w", ErrCorrupt, path, err)
	}
	if int64(len(data)) != s.Bytes {
		return nil, fmt.Errorf("%w: tasks sidecar %s has %s bytes, the manifest says %d", ErrCorrupt, path, sizeText(len(data), s.Bytes), s.Bytes)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != s.SHA256 {
		return nil, fmt.Errorf("%w: tasks sidecar %s has sha256 %s, the manifest says %s", ErrCorrupt, path, got, s.SHA256)
	}
	return data, nil
}

// sizeText says "more than n" when the limited read hit the limit.
func sizeText(got int, want int64) string {
	if int64(got) > want {
		return fmt.Sprintf("more than %d", want)
	}
	return fmt.Sprint(got)
}

// tasksSidecar is a Writer's memory of the tasks sidecar its manifest
// references, so that a manifest write with unchanged tasks neither hashes
// nor rewrites them. A nil *tasksSidecar remembers nothing.
type tasksSidecar struct {
	data []byte      // the Tasks the sidecar holds (shared, never mutated)
	info SidecarInfo // zero when the manifest references none
}

// ensure returns the sidecar holding data, writing it (temporary file,
// fsync, rename, fsync of the directory) unless it is the one already
// referenced.
func (side *tasksSidecar) ensure(dir string, data []byte) (SidecarInfo, error) {
	if side != nil && side.info.File != "" && bytes.Equal(side.data, data) {
		return side.info, nil
	}
	sum := sha256.Sum256(data)
	info := SidecarInfo{File: sidecarName(hex.EncodeToString(sum[:])), Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	tmp := filepath.Join(dir, "."+info.File+".tmp")
	if err := writeFileSync(tmp, data); err != nil {
		os.Remove(tmp)
		return SidecarInfo{}, fmt.Errorf("shard: write tasks sidecar: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, info.File)); err != nil {
		os.Remove(tmp)
		return SidecarInfo{}, fmt.Errorf("shard: write tasks sidecar: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return SidecarInfo{}, fmt.Errorf("shard: write tasks sidecar: %w", err)
	}
	return info, nil
}

// referenced records that the manifest just written references info, which
// holds data (nil: no sidecar), and deletes the sidecar it referenced
// before, which no manifest names any more. A crash before the deletion
// leaves an unreferenced sidecar, which Resume deletes.
func (side *tasksSidecar) referenced(dir string, info *SidecarInfo, data []byte) {
	if side == nil {
		return
	}
	old := side.info
	if info == nil {
		side.info, side.data = SidecarInfo{}, nil
	} else {
		side.info, side.data = *info, data
	}
	if old.File != "" && old.File != side.info.File {
		if err := os.Remove(filepath.Join(dir, old.File)); err == nil || errors.Is(err, os.ErrNotExist) {
			syncDir(dir)
		}
	}
}

// current returns a copy of the sidecar the manifest references, or nil.
func (side *tasksSidecar) current() *SidecarInfo {
	if side == nil || side.info.File == "" {
		return nil
	}
	info := side.info
	return &info
}

// remember seeds the memory with a sidecar read back and verified (Resume).
func (side *tasksSidecar) remember(data []byte, info *SidecarInfo) {
	if side == nil || info == nil {
		return
	}
	side.data, side.info = data, *info
}
