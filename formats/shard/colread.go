package shard

import (
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
)

// Column-wise reading of a few flat columns. parquet-go's row reader, given
// a projection (a struct with some of a table's columns), still decodes
// every column of the file and converts each row (convertedRows), so
// reading the lineage's five columns of the episodes table cost as much as
// reading the whole table. Reading the wanted column chunks page by page
// touches only them.

// flatColumn is one top-level, non-repeated column to read: its name, the
// physical type it must have, and what to do with each row's value (a null
// of an optional column included). A column the file does not hold is
// skipped: every row keeps its zero value, as the row reader gives it.
type flatColumn struct {
	name string
	kind parquet.Kind
	set  func(row int, v parquet.Value)
}

// errNotFlat says a shard's columns do not have the shape flatColumns
// reads (a caller falls back to the row reader, which converts).
var errNotFlat = errors.New("columns are not flat columns of the expected types")

// readFlatColumns reads cols of the shard s: for each row group, start is
// called with the row group's row count before the columns' values are
// set (rows numbered from 0 in the group), and done after. A file whose
// named columns are not flat columns of the expected kinds is errNotFlat,
// before any call; a damaged file is ErrCorrupt naming it.
func readFlatColumns(src *source, s ShardInfo, cols []flatColumn, start func(rows int) error, done func() error) error {
	f, pf, err := src.open(s)
	if err != nil {
		return err
	}
	defer f.Close()
	path := src.path(s)
	index := make([]int, len(cols))
	for i, c := range cols {
		leaf, ok := pf.Schema().Lookup(c.name)
		if !ok {
			index[i] = -1
			continue
		}
		if len(leaf.Path) != 1 || leaf.MaxRepetitionLevel != 0 || leaf.Node.Type().Kind() != c.kind {
			return errNotFlat
		}
		index[i] = leaf.ColumnIndex
	}
	var seen int64
	buf := make([]parquet.Value, 1024)
	for _, rg := range pf.RowGroups() {
		n := rg.NumRows()
		if err := start(int(n)); err != nil {
			return err
		}
		chunks := rg.ColumnChunks()
		for i, c := range cols {
			if index[i] < 0 {
				continue
			}
			if index[i] >= len(chunks) {
				return fmt.Errorf("%w: %s: column %s has no chunk in a row group", ErrCorrupt, path, c.name)
			}
			got, err := readChunk(chunks[index[i]], buf, n, c.set)
			if err != nil {
				return fmt.Errorf("%w: %s: column %s: %w", ErrCorrupt, path, c.name, err)
			}
			if got != n {
				return fmt.Errorf("%w: %s: column %s has %d values in a row group of %d rows", ErrCorrupt, path, c.name, got, n)
			}
		}
		if err := done(); err != nil {
			return err
		}
		seen += n
	}
	if seen != s.Rows {
		return fmt.Errorf("%w: %s: read %d rows, the manifest says %d", ErrCorrupt, path, seen, s.Rows)
	}
	return nil
}

// readChunk hands every value of a flat column chunk to set, in row order,
// and returns how many there were; more than rows values is an error. A
// page that fails to decode — or panics doing so, as parquet-go can on a
// damaged page — is an error.
func readChunk(chunk parquet.ColumnChunk, buf []parquet.Value, rows int64, set func(int, parquet.Value)) (n int64, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("decoding a page panicked: %v", p)
		}
	}()
	pages := chunk.Pages()
	defer pages.Close()
	for {
		page, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		values := page.Values()
		for {
			k, err := values.ReadValues(buf)
			for _, v := range buf[:k] {
				if n >= rows {
					parquet.Release(page)
					return n, fmt.Errorf("more values than the row group's %d rows", rows)
				}
				set(int(n), v)
				n++
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				parquet.Release(page)
				return n, err
			}
			if k == 0 {
				break
			}
		}
		parquet.Release(page)
	}
}
