package shard

import (
	"errors"
	"iter"

	"github.com/parquet-go/parquet-go"
)

// Column is one flat column for ReadColumns: a top-level, non-repeated
// column of a table and what to do with each row's value. Made by
// StringColumn, Int32Column, Float64Column and BoolColumn.
type Column struct{ c flatColumn }

// StringColumn reads a string column; null is set for a null of an
// optional column. v is valid only during the call (copy it to keep it).
func StringColumn(name string, set func(row int, v []byte, null bool)) Column {
	return Column{flatColumn{name, parquet.ByteArray, func(i int, v parquet.Value) { set(i, v.ByteArray(), v.IsNull()) }}}
}

// Int32Column reads an int32 column.
func Int32Column(name string, set func(row int, v int32, null bool)) Column {
	return Column{flatColumn{name, parquet.Int32, func(i int, v parquet.Value) { set(i, v.Int32(), v.IsNull()) }}}
}

// Float64Column reads a double column.
func Float64Column(name string, set func(row int, v float64, null bool)) Column {
	return Column{flatColumn{name, parquet.Double, func(i int, v parquet.Value) { set(i, v.Double(), v.IsNull()) }}}
}

// BoolColumn reads a boolean column.
func BoolColumn(name string, set func(row int, v bool, null bool)) Column {
	return Column{flatColumn{name, parquet.Boolean, func(i int, v parquet.Value) { set(i, v.Boolean(), v.IsNull()) }}}
}

// ErrNotFlat: ReadColumns was asked for columns a shard does not hold as
// flat columns of those types (an older schema); the caller reads that
// shard with ProjectShard instead.
var ErrNotFlat = errNotFlat

// ReadColumns reads only cols of the listed shard s, column by column
// (parquet-go's row reader decodes every column of a file even for a
// projection): for each row group, start gets its row count, then each
// column's values are set in row order (rows numbered from 0 within the
// group), then done is called. A column the shard lacks is skipped (its
// rows keep what start left). The shard is checked against its manifest
// entry (size, sha256) as every reader checks it. It is safe to call for
// different shards concurrently.
func (d *Dataset) ReadColumns(s ShardInfo, cols []Column, start func(rows int) error, done func() error) error {
	fc := make([]flatColumn, len(cols))
	for i, c := range cols {
		fc[i] = c.c
	}
	err := readFlatColumns(d.src, s, fc, start, done)
	if errors.Is(err, errNotFlat) {
		return ErrNotFlat
	}
	return err
}

// ProjectShard is Project over one listed shard.
func ProjectShard[T any](d *Dataset, s ShardInfo) iter.Seq2[T, error] {
	return readShards[T](d.src, []ShardInfo{s}, readBatchKeys)
}
