package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/schemas"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
)

// shardName returns the file name of generation g's shard.
func shardName(g int) string { return fmt.Sprintf("part-%05d.parquet", g) }

// tmpName returns the hidden name a shard has while its generation is open.
func tmpName(g int) string { return "." + shardName(g) + ".tmp" }

// isShardName reports whether name is a shard's file name: part-NNNNN.parquet
// with five digits or more.
func isShardName(name string) bool {
	num, ok := strings.CutPrefix(name, "part-")
	if !ok {
		return false
	}
	num, ok = strings.CutSuffix(num, ".parquet")
	return ok && len(num) >= 5 && strings.Trim(num, "0123456789") == ""
}

// isShardTmpName reports whether name is a shard's temporary name.
func isShardTmpName(name string) bool {
	inner, ok := strings.CutPrefix(name, ".")
	if !ok {
		return false
	}
	inner, ok = strings.CutSuffix(inner, ".tmp")
	return ok && isShardName(inner)
}

// shardWriter is the interface the generation needs from a tableFile of any
// row type.
type shardWriter interface {
	finish() (ShardInfo, error)
	abandon()
}

// countWriter counts the bytes written through it.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// tableFile is one table's shard of the open generation: a Parquet writer
// over a temporary file, hashing and counting every byte on its way out.
type tableFile[T any] struct {
	table    string
	gen      int
	dir      string // the table's directory
	f        *os.File
	sum      hash.Hash
	size     countWriter
	pw       *parquet.GenericWriter[T]
	rows     int64
	buffered int64 // estimated bytes since the last row-group flush
	groupN   int64 // rows since the last row-group flush
	groupMax int64
	zeroNull []int // see zeroNullFields
}

// zeroNullFields returns the indexes of T's ",optional" fields that are
// not pointers, whose zero value is written as null.
//
// parquet-go v0.32.0 mis-writes such fields when one Write call mixes nulls
// and values in a column: its run scan in writeRowsFuncOfOptional tests the
// wrong bit mask, and with k nulls, then k values, then nulls, the trailing
// nulls get definition level 1 (present and empty), so other readers see
// "" or 0 instead of null. A Write whose rows are all null or all present
// in each such column is a single run and comes out right, so write splits
// rows into runs of equal presence. Pointer fields are not affected.
// TestOptionalZeroStaysNull guards it.
func zeroNullFields(t reflect.Type) []int {
	var idx []int
	for f := range t.Fields() {
		_, opts, _ := strings.Cut(f.Tag.Get("parquet"), ",")
		if f.Type.Kind() != reflect.Pointer && slices.Contains(strings.Split(opts, ","), "optional") {
			idx = append(idx, f.Index[0])
		}
	}
	return idx
}

// samePresence reports whether a and b are null in the same zeroNull
// fields.
func samePresence[T any](a, b *T, zeroNull []int) bool {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	for _, i := range zeroNull {
		if va.Field(i).IsZero() != vb.Field(i).IsZero() {
			return false
		}
	}
	return true
}

func createTableFile[T any](root, table string, gen int, runID string, codec compress.Codec, rowGroupBytes int64) (*tableFile[T], error) {
	dir := filepath.Join(root, table)
	f, err := os.OpenFile(filepath.Join(dir, tmpName(gen)), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("shard: create %s shard %d: %w", table, gen, err)
	}
	t := &tableFile[T]{table: table, gen: gen, dir: dir, f: f, sum: sha256.New(), groupMax: rowGroupBytes,
		zeroNull: zeroNullFields(reflect.TypeFor[T]())}
	opts := []parquet.WriterOption{
		parquet.Compression(codec),
		parquet.KeyValueMetadata(schemas.MetaSchemaVersion, strconv.Itoa(schemas.Version)),
		parquet.KeyValueMetadata(schemas.MetaTable, table),
		parquet.KeyValueMetadata(schemas.MetaRunID, runID),
	}
	t.pw = parquet.NewGenericWriter[T](io.MultiWriter(f, t.sum, &t.size), append(opts, unboundedStats(parquet.SchemaOf(reflect.Zero(reflect.TypeFor[T]()).Interface()))...)...)
	return t, nil
}

// boundedColumns are the byte-array columns whose values are short
// identifiers and names: they keep their statistics (min and max per page
// and per column chunk), which readers use to skip row groups when they
// filter by episode, task or group.
var boundedColumns = map[string]bool{
	"episode_id": true, "run_id": true, "task_id": true, "task_hash": true, "group_id": true,
	"parent_episode_id": true, "golden_id": true, "sha256": true, "exit_reason": true,
	"action_kind": true, "error_kind": true, "name": true, "media_type": true, "provider": true,
}

// unboundedStats are the writer options that leave out the statistics of
// every other byte-array column: an output, an action, a screenshot, a
// model's text. parquet-go writes a page's minimum and maximum whole into
// its page header (twice each: the current and the deprecated fields) and
// the column chunk's into the footer, uncompressed, so a 1 MiB value cost
// about five times its size on disk (one 62.9 MB action made a 377 MB
// shard), and as much memory while the page was written. Nothing reads
// the bounds of such a column: a reader filtering on one reads its values.
func unboundedStats(schema *parquet.Schema) []parquet.WriterOption {
	var opts []parquet.WriterOption
	for _, leaf := range schema.Columns() {
		col, _ := schema.Lookup(leaf...)
		if col.Node.Type().Kind() != parquet.ByteArray || (len(leaf) == 1 && boundedColumns[leaf[0]]) {
			continue
		}
		opts = append(opts, parquet.SkipPageStatistics(leaf...), parquet.SkipPageBounds(leaf...))
	}
	return opts
}

// write appends rows whose estimated size is bytes, flushing the row group
// when enough is buffered.
func (t *tableFile[T]) write(rows []T, bytes int64) error {
	rows0 := rows
	for len(rows) > 0 {
		n := 1 // rows[:n] have equal presence: see zeroNullFields
		for n < len(rows) && samePresence(&rows[0], &rows[n], t.zeroNull) {
			n++
		}
		if _, err := t.pw.Write(rows[:n]); err != nil {
			return fmt.Errorf("shard: write %s shard %d: %w", t.table, t.gen, err)
		}
		t.rows += int64(n)
		rows = rows[n:]
	}
	t.buffered += bytes
	t.groupN += int64(len(rows0))
	if t.buffered >= t.groupMax || t.groupN >= maxGroupRows {
		if err := t.pw.Flush(); err != nil {
			return fmt.Errorf("shard: flush %s shard %d: %w", t.table, t.gen, err)
		}
		t.buffered, t.groupN = 0, 0
	}
	return nil
}

// maxGroupRows also closes a row group after this many rows. parquet-go's
// in-memory buffers for many small rows (dictionaries, per-row definition
// levels) were measured at about ten times their estimated size, so a byte
// estimate alone let a long generation of small episodes grow the writer's
// memory with the episode count; a row cap bounds it.
const maxGroupRows = 2048

// finish writes the footer, fsyncs, closes and renames the file to its
// final name. The caller fsyncs the directory.
func (t *tableFile[T]) finish() (ShardInfo, error) {
	fail := func(step string, err error) (ShardInfo, error) {
		t.abandon()
		return ShardInfo{}, fmt.Errorf("shard: %s %s shard %d: %w", step, t.table, t.gen, err)
	}
	if err := t.pw.Close(); err != nil {
		return fail("close", err)
	}
	if err := t.f.Sync(); err != nil {
		return fail("sync", err)
	}
	if err := t.f.Close(); err != nil {
		t.f = nil
		return fail("close", err)
	}
	t.f = nil
	if err := os.Rename(filepath.Join(t.dir, tmpName(t.gen)), filepath.Join(t.dir, shardName(t.gen))); err != nil {
		return fail("rename", err)
	}
	return ShardInfo{
		File:       path.Join(t.table, shardName(t.gen)),
		Table:      t.table,
		Generation: t.gen,
		Rows:       t.rows,
		Bytes:      t.size.n,
		SHA256:     hex.EncodeToString(t.sum.Sum(nil)),
	}, nil
}

// abandon releases the file without finishing it; the temporary file stays
// behind for Resume to remove.
func (t *tableFile[T]) abandon() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
}
