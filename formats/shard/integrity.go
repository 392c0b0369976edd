package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/forkline/forkline/schemas"
	"github.com/parquet-go/parquet-go"
)

// hashBufferBytes is the read size while a shard is hashed: big enough for
// sequential throughput, small enough that hashing never holds a shard.
const hashBufferBytes = 1 << 20

var hashBuffers = sync.Pool{New: func() any { b := make([]byte, hashBufferBytes); return &b }}

// source is where the shards of one dataset are read from. Every shard is
// checked against its manifest entry before a row of it is decoded: size,
// sha256 (the whole file, read once sequentially), then the footer's row
// count and forkline metadata, run id included. See "Integrity" in the
// package documentation for why the file is hashed before decoding rather
// than while the Parquet reader pulls it.
//
// A source remembers the files whose hash matched, so that a shard opened
// again by the same reader (Dataset.Blob opens the blobs shard for every
// lookup) is not hashed again while it is the same, unchanged file.
type source struct {
	dir   string
	runID string

	mu       sync.Mutex
	verified map[ShardInfo]os.FileInfo // entry → the file as it was when its hash matched
}

func newSource(dir, runID string) *source {
	return &source{dir: dir, runID: runID, verified: map[ShardInfo]os.FileInfo{}}
}

// path is the shard's path as error messages show it.
func (src *source) path(s ShardInfo) string {
	return filepath.Join(src.dir, filepath.FromSlash(s.File))
}

// knownGood reports whether s was hashed by this source and fi is still the
// same file, with the same size and modification time.
func (src *source) knownGood(s ShardInfo, fi os.FileInfo) bool {
	src.mu.Lock()
	defer src.mu.Unlock()
	prev, ok := src.verified[s]
	return ok && os.SameFile(prev, fi) && prev.Size() == fi.Size() && prev.ModTime().Equal(fi.ModTime())
}

func (src *source) remember(s ShardInfo, fi os.FileInfo) {
	src.mu.Lock()
	defer src.mu.Unlock()
	src.verified[s] = fi
}

// open opens a listed shard after checking it against its manifest entry:
// size, sha256, then the footer (row count, schema version, table, run id).
// Every mismatch is ErrCorrupt naming the file.
func (src *source) open(s ShardInfo) (*os.File, *parquet.File, error) {
	path := src.path(s)
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: listed shard %s: %w", ErrCorrupt, path, err)
	}
	fail := func(err error) (*os.File, *parquet.File, error) {
		f.Close()
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("shard: %s: %w", path, err))
	}
	if fi.Size() != s.Bytes {
		return fail(fmt.Errorf("%w: %s has %d bytes, the manifest says %d", ErrCorrupt, path, fi.Size(), s.Bytes))
	}
	if !src.knownGood(s, fi) {
		sum, err := hashFile(f, fi.Size())
		if err != nil {
			return fail(fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err))
		}
		if sum != s.SHA256 {
			return fail(fmt.Errorf("%w: %s has sha256 %s, the manifest says %s", ErrCorrupt, path, sum, s.SHA256))
		}
		src.remember(s, fi)
	}
	pf, err := openParquet(f, fi.Size())
	if err != nil {
		return fail(fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err))
	}
	if err := checkShardMeta(pf, s, src.runID, path); err != nil {
		return fail(err)
	}
	return f, pf, nil
}

// check opens and closes a shard: the checks of open without reading rows.
func (src *source) check(s ShardInfo) error {
	f, _, err := src.open(s)
	if err != nil {
		return err
	}
	return f.Close()
}

// hashFile returns the hex sha256 of the first size bytes of f, read from
// offset 0 without moving f's offset (the Parquet reader uses ReadAt).
func hashFile(f *os.File, size int64) (string, error) {
	h := sha256.New()
	buf := hashBuffers.Get().(*[]byte)
	defer hashBuffers.Put(buf)
	n, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, size), *buf)
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("read %d of %d bytes", n, size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// openParquet is parquet.OpenFile with a panic on a malformed footer turned
// into an error.
func openParquet(r io.ReaderAt, size int64) (pf *parquet.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			pf, err = nil, fmt.Errorf("decoding the footer panicked: %v", p)
		}
	}()
	return parquet.OpenFile(r, size)
}

// readRows is r.Read with a panic while decoding pages turned into an
// error. parquet-go trusts the bytes of a page it decodes, so a damaged
// shard can make it index out of range or build a slice from a nil
// pointer; the sha256 check catches damage first, this catches a shard
// listed with a wrong hash. Only the decoding runs under the recover, never
// the caller's code.
func readRows[T any](r *parquet.GenericReader[T], buf []T) (n int, err error) {
	defer func() {
		if p := recover(); p != nil {
			n, err = 0, fmt.Errorf("decoding a page panicked: %v", p)
		}
	}()
	return r.Read(buf)
}

// seekRow is r.SeekToRow with a panic turned into an error.
func seekRow[T any](r *parquet.GenericReader[T], row int64) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("seeking row %d panicked: %v", row, p)
		}
	}()
	return r.SeekToRow(row)
}

// checkShardMeta compares a shard's footer with its manifest entry and the
// dataset's run id.
func checkShardMeta(pf *parquet.File, s ShardInfo, runID, path string) error {
	v, _ := pf.Lookup(schemas.MetaSchemaVersion)
	if n, err := strconv.Atoi(v); err != nil || !schemas.Readable(n) {
		return fmt.Errorf("%w: %s has %s = %q; this build reads versions %s", ErrSchemaVersion, path, schemas.MetaSchemaVersion, v, readableVersions())
	}
	if t, _ := pf.Lookup(schemas.MetaTable); t != s.Table {
		return fmt.Errorf("%w: %s has %s = %q, the manifest says %q", ErrCorrupt, path, schemas.MetaTable, t, s.Table)
	}
	if pf.NumRows() != s.Rows {
		return fmt.Errorf("%w: %s holds %d rows, the manifest says %d", ErrCorrupt, path, pf.NumRows(), s.Rows)
	}
	if id, _ := pf.Lookup(schemas.MetaRunID); id != runID {
		return fmt.Errorf("%w: %s has %s = %q, the manifest's run_id is %q", ErrCorrupt, path, schemas.MetaRunID, id, runID)
	}
	return nil
}
