package shard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/forkline/forkline/schemas"
)

// Column-wise reading of whole rows. parquet-go's row reader reconstructs
// each row value by value through its generic row form and converts it into
// the row struct by reflection; for the steps and episodes tables that was a
// quarter of an export's CPU. Here each row group's column chunks are read
// one after the other, page by page, each value set straight into the row
// structs of the group (a field at its offset), list columns by their
// repetition and definition levels. The rows are the row reader's, field for
// field (a test compares both readers on every table of many datasets): a
// null reads as the zero value, a null pointer column as nil, an empty list
// of numbers as an empty slice and of strings as nil.

// fieldKind is how a row field is stored and set.
type fieldKind int

const (
	kString      fieldKind = iota // string (a null reads as "")
	kBytes                        // []byte (a null reads as nil)
	kInt32                        // int32
	kInt64                        // int64
	kFloat64                      // float64
	kBool                         // bool
	kPString                      // *string
	kPInt32                       // *int32
	kPFloat64                     // *float64
	kListInt32                    // []int32 as a LIST of int32
	kListFloat32                  // []float32 as a LIST of float
	kListString                   // []string as a LIST of byte arrays
)

// physical is the Parquet physical type a field kind is read from.
func (k fieldKind) physical() parquet.Kind {
	switch k {
	case kInt32, kPInt32, kListInt32:
		return parquet.Int32
	case kInt64:
		return parquet.Int64
	case kFloat64, kPFloat64:
		return parquet.Double
	case kListFloat32:
		return parquet.Float
	case kBool:
		return parquet.Boolean
	}
	return parquet.ByteArray
}

func (k fieldKind) list() bool { return k >= kListInt32 }

// rowField is one column of a row type: its name and where its value goes.
type rowField struct {
	name string
	off  uintptr
	kind fieldKind
}

// layoutOf is the columns of the row struct t, from its parquet tags. It
// panics on a field type it does not know: the row types are this module's
// (schemas), and a test reads each.
func layoutOf(t reflect.Type) []rowField {
	var fields []rowField
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("parquet")
		if !ok || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		var k fieldKind
		switch f.Type {
		case reflect.TypeFor[string]():
			k = kString
		case reflect.TypeFor[[]byte]():
			k = kBytes
		case reflect.TypeFor[int32]():
			k = kInt32
		case reflect.TypeFor[int64]():
			k = kInt64
		case reflect.TypeFor[float64]():
			k = kFloat64
		case reflect.TypeFor[bool]():
			k = kBool
		case reflect.TypeFor[*string]():
			k = kPString
		case reflect.TypeFor[*int32]():
			k = kPInt32
		case reflect.TypeFor[*float64]():
			k = kPFloat64
		case reflect.TypeFor[[]int32]():
			k = kListInt32
		case reflect.TypeFor[[]float32]():
			k = kListFloat32
		case reflect.TypeFor[[]string]():
			k = kListString
		default:
			panic(fmt.Sprintf("shard: column-wise rows: %s.%s has type %s", t.Name(), f.Name, f.Type))
		}
		fields = append(fields, rowField{name: name, off: f.Offset, kind: k})
	}
	return fields
}

// The layouts of the tables read column-wise.
var (
	stepLayout    = layoutOf(reflect.TypeFor[schemas.StepRow]())
	episodeLayout = layoutOf(reflect.TypeFor[schemas.EpisodeRow]())
	rewardLayout  = layoutOf(reflect.TypeFor[schemas.RewardRow]())
)

// layoutFor is T's layout, nil for a type not read column-wise.
func layoutFor[T any]() []rowField {
	switch any(*new(T)).(type) {
	case schemas.StepRow:
		return stepLayout
	case schemas.EpisodeRow:
		return episodeLayout
	case schemas.RewardRow:
		return rewardLayout
	}
	return nil
}

// colRows reads one shard's rows of type T column-wise, a row group at a
// time: the rows of one row group are in memory at once (the writer
// bounds a row group's bytes).
type colRows[T any] struct {
	f      *os.File
	pf     *parquet.File
	path   string
	want   int64 // rows the manifest lists
	fields []rowField
	index  []int // each field's column index; -1 when the file lacks it
	rg     int   // the next row group
	rows   []T
	pos    int
	seen   int64
	buf    []parquet.Value
	window []parquet.Value // the flat columns' value buffers (flatColumns)
}

// openColRows opens shard s to read its rows column-wise; errNotFlat when
// a column has another shape than T's field (the caller reads rows
// instead), after which nothing is left open.
func openColRows[T any](src *source, s ShardInfo, fields []rowField) (*colRows[T], error) {
	f, pf, err := src.open(s)
	if err != nil {
		return nil, err
	}
	r := &colRows[T]{f: f, pf: pf, path: src.path(s), want: s.Rows, fields: fields, index: make([]int, len(fields)), buf: make([]parquet.Value, 1024)}
	schema := pf.Schema()
	for i, fd := range fields {
		r.index[i] = -1
		leaf, flat := schema.Lookup(fd.name)
		if fd.kind.list() {
			if flat {
				f.Close()
				return nil, errNotFlat
			}
			leaf, flat = schema.Lookup(fd.name, "list", "element")
			if !flat {
				if _, any := columnNamed(schema, fd.name); any {
					f.Close()
					return nil, errNotFlat
				}
				continue
			}
			if leaf.MaxRepetitionLevel != 1 || leaf.Node.Type().Kind() != fd.kind.physical() {
				f.Close()
				return nil, errNotFlat
			}
		} else {
			if !flat {
				if _, any := columnNamed(schema, fd.name); any {
					f.Close()
					return nil, errNotFlat
				}
				continue
			}
			if len(leaf.Path) != 1 || leaf.MaxRepetitionLevel != 0 || leaf.Node.Type().Kind() != fd.kind.physical() {
				f.Close()
				return nil, errNotFlat
			}
		}
		r.index[i] = leaf.ColumnIndex
	}
	return r, nil
}

// columnNamed reports whether the schema has a column under name.
func columnNamed(schema *parquet.Schema, name string) ([]string, bool) {
	for _, p := range schema.Columns() {
		if len(p) > 0 && p[0] == name {
			return p, true
		}
	}
	return nil, false
}

func (r *colRows[T]) close() { r.f.Close() }

// next returns the next row; ok is false after the last row or an error.
func (r *colRows[T]) next() (row T, err error, ok bool) {
	for r.pos >= len(r.rows) {
		rgs := r.pf.RowGroups()
		if r.rg >= len(rgs) {
			if r.seen != r.want {
				return row, fmt.Errorf("%w: %s: read %d rows, the manifest says %d", ErrCorrupt, r.path, r.seen, r.want), true
			}
			return row, nil, false
		}
		if err := r.load(rgs[r.rg]); err != nil {
			return row, err, true
		}
		r.rg++
	}
	row = r.rows[r.pos]
	r.pos++
	return row, nil, true
}

// load reads row group rg's columns into r.rows.
func (r *colRows[T]) load(rg parquet.RowGroup) error {
	n := rg.NumRows()
	// The rows handed out before are copies; what they point to (strings,
	// lists) was allocated for them, so the slice is reused.
	r.rows = slices.Grow(r.rows[:0], int(n))[:n]
	clear(r.rows)
	r.pos = 0
	chunks := rg.ColumnChunks()
	var flat []int // the fields of flat columns the file has
	for i, fd := range r.fields {
		if r.index[i] < 0 {
			continue
		}
		if r.index[i] >= len(chunks) {
			return fmt.Errorf("%w: %s: column %s has no chunk in a row group", ErrCorrupt, r.path, fd.name)
		}
		if !fd.kind.list() {
			flat = append(flat, i)
			continue
		}
		if err := r.listColumn(chunks[r.index[i]], fd, n); err != nil {
			return fmt.Errorf("%w: %s: column %s: %w", ErrCorrupt, r.path, fd.name, err)
		}
	}
	if err := r.flatColumns(chunks, flat, n); err != nil {
		return err
	}
	r.seen += n
	return nil
}

// flatWindow is how many rows the flat columns are set in at a time.
// Setting a whole row group's rows column after column walked megabytes of
// row structs once per column, each store a cache miss; a window of rows
// stays in the cache while every column sets its fields (a tenth of an
// export's reading, profiled).
const flatWindow = 256

// flatColumns sets the flat fields (indexes into r.fields) of the group's
// n rows from their chunks, flatWindow rows at a time, every column's pages
// read side by side.
func (r *colRows[T]) flatColumns(chunks []parquet.ColumnChunk, fields []int, n int64) (err error) {
	cursors := make([]valueCursor, len(fields))
	defer func() {
		for i := range cursors {
			cursors[i].close()
		}
		if p := recover(); p != nil {
			// parquet-go can panic on a damaged page
			err = fmt.Errorf("%w: %s: decoding a page panicked: %v", ErrCorrupt, r.path, p)
		}
	}()
	if len(r.window) < len(fields)*flatWindow {
		r.window = make([]parquet.Value, len(r.fields)*flatWindow)
	}
	for i, f := range fields {
		cursors[i].pages = chunks[r.index[f]].Pages()
		cursors[i].buf = r.window[i*flatWindow : (i+1)*flatWindow : (i+1)*flatWindow]
	}
	base := unsafe.Pointer(unsafe.SliceData(r.rows))
	size := unsafe.Sizeof(*new(T))
	for from := int64(0); from < n; from += flatWindow {
		to := min(from+flatWindow, n)
		for i, f := range fields {
			fd := r.fields[f]
			c := &cursors[i]
			for row := from; row < to; {
				v, err := c.values()
				if err != nil {
					if errors.Is(err, io.EOF) {
						err = fmt.Errorf("%d values in a row group of %d rows", row, n)
					}
					return fmt.Errorf("%w: %s: column %s: %w", ErrCorrupt, r.path, fd.name, err)
				}
				k := min(int64(len(v)), to-row)
				setFlats(unsafe.Add(base, uintptr(row)*size+fd.off), size, fd.kind, v[:k])
				row += k
				c.consume(int(k))
			}
		}
	}
	for i, f := range fields {
		if _, err := cursors[i].values(); !errors.Is(err, io.EOF) {
			if err == nil {
				err = fmt.Errorf("more values than the row group's %d rows", n)
			}
			return fmt.Errorf("%w: %s: column %s: %w", ErrCorrupt, r.path, r.fields[f].name, err)
		}
	}
	return nil
}

// valueCursor reads a column chunk's values a buffer at a time, page after
// page. A byte array value points into its page, so a page is released only
// once its values are consumed.
type valueCursor struct {
	pages    parquet.Pages
	page     parquet.Page
	vr       parquet.ValueReader
	pageDone bool // vr has no more values than those in have
	buf      []parquet.Value
	have     []parquet.Value // read and not yet consumed
}

// values returns the values read and not yet consumed, reading more when
// there are none; io.EOF after the chunk's last.
func (c *valueCursor) values() ([]parquet.Value, error) {
	for len(c.have) == 0 {
		if c.pageDone {
			c.release()
		}
		if c.vr == nil {
			page, err := c.pages.ReadPage()
			if err != nil {
				return nil, err
			}
			c.page, c.vr = page, page.Values()
		}
		k, err := c.vr.ReadValues(c.buf)
		c.have = c.buf[:k]
		switch {
		case errors.Is(err, io.EOF), err == nil && k == 0:
			c.pageDone = true
		case err != nil:
			return nil, err
		}
	}
	return c.have, nil
}

// consume marks the first k values of have consumed.
func (c *valueCursor) consume(k int) { c.have = c.have[k:] }

// release lets the current page go.
func (c *valueCursor) release() {
	if c.page != nil {
		parquet.Release(c.page)
	}
	c.page, c.vr, c.pageDone, c.have = nil, nil, false, nil
}

// close releases the page and closes the pages.
func (c *valueCursor) close() {
	if c.pages == nil {
		return
	}
	c.release()
	c.pages.Close()
}

// listColumn sets list field fd of every row of the group from its chunk
// (flatColumns sets the others).
func (r *colRows[T]) listColumn(chunk parquet.ColumnChunk, fd rowField, rows int64) error {
	base := unsafe.Pointer(unsafe.SliceData(r.rows))
	size := unsafe.Sizeof(*new(T))
	at := func(row int) unsafe.Pointer { return unsafe.Add(base, uintptr(row)*size+fd.off) }
	// A list: a value with repetition level 0 starts a row; a value below
	// the maximum definition level is an empty list's placeholder.
	var (
		ints   []int32
		floats []float32
		strs   []string
		starts = make([]int, 0, rows+1)
		err    error
	)
	// The values are about as many as the chunk says it holds (an empty
	// list's placeholder is one too): room for them at once, up to
	// maxListPrealloc (the count is the file's word, and a shard is
	// untrusted input; past it the slice grows as values come).
	switch values := int(min(max(chunk.NumValues(), 0), maxListPrealloc)); fd.kind {
	case kListInt32:
		ints = make([]int32, 0, values)
	case kListFloat32:
		floats = make([]float32, 0, values)
	}
	row := -1
	// A run of values a call (a call a value, and the slices regrown, were
	// most of reading token ids).
	each := func(vs []parquet.Value) error {
		for i := range vs {
			v := &vs[i]
			if v.RepetitionLevel() == 0 {
				row++
				if int64(row) >= rows {
					return fmt.Errorf("more lists than the row group's %d rows", rows)
				}
				starts = append(starts, len(ints)+len(floats)+len(strs))
			}
			if v.IsNull() {
				continue
			}
			switch fd.kind {
			case kListInt32:
				ints = append(ints, v.Int32())
			case kListFloat32:
				floats = append(floats, v.Float())
			default:
				strs = append(strs, string(v.ByteArray()))
			}
		}
		return nil
	}
	if err = readValues(chunk, r.buf, each); err != nil {
		return err
	}
	if int64(row+1) != rows {
		return fmt.Errorf("%d lists in a row group of %d rows", row+1, rows)
	}
	starts = append(starts, len(ints)+len(floats)+len(strs))
	for j := range int(rows) {
		a, b := starts[j], starts[j+1]
		p := at(j)
		switch {
		case a == b && fd.kind == kListString:
			// nil, as readShard normalizes an empty list of strings
		case a == b && fd.kind == kListInt32:
			*(*[]int32)(p) = emptyInt32
		case a == b:
			*(*[]float32)(p) = emptyFloat32
		case fd.kind == kListInt32:
			*(*[]int32)(p) = ints[a:b:b]
		case fd.kind == kListFloat32:
			*(*[]float32)(p) = floats[a:b:b]
		default:
			*(*[]string)(p) = strs[a:b:b]
		}
	}
	return nil
}

// maxListPrealloc bounds the values a list column's slice is made with
// before any is read: 4 Mi values, 16 MiB of token ids (a row group of the
// default 8 MiB holds at most about 2 Mi).
const maxListPrealloc = 4 << 20

// An empty list of numbers reads as an empty slice, not nil, as the row
// reader gives it (JSON exports write it as [], not null). Zero capacity:
// an append to one allocates.
var (
	emptyInt32   = []int32{}
	emptyFloat32 = []float32{}
)

// setFlats sets the field of kind k at p, and at each stride after it, to
// the values in order: one call and one switch a run of values (a call a
// value, with the value copied through the stack, was a fifth of an export
// to jsonl). A null leaves the zero value, as cleared. Each field's address
// is computed from p, never stepped past the last row (a pointer one row
// beyond the rows' allocation is invalid: checkptr, under -race, stops it).
func setFlats(p unsafe.Pointer, stride uintptr, k fieldKind, vs []parquet.Value) {
	switch k {
	case kString:
		for i := range vs {
			if v := &vs[i]; !v.IsNull() {
				q := unsafe.Add(p, uintptr(i)*stride)
				*(*string)(q) = string(v.ByteArray())
			}
		}
	case kBytes:
		for i := range vs {
			if v := &vs[i]; !v.IsNull() {
				q := unsafe.Add(p, uintptr(i)*stride)
				*(*[]byte)(q) = bytes.Clone(v.ByteArray())
			}
		}
	case kInt32:
		for i := range vs {
			if v := &vs[i]; !v.IsNull() {
				q := unsafe.Add(p, uintptr(i)*stride)
				*(*int32)(q) = v.Int32()
			}
		}
	case kInt64:
		for i := range vs {
			if v := &vs[i]; !v.IsNull() {
				q := unsafe.Add(p, uintptr(i)*stride)
				*(*int64)(q) = v.Int64()
			}
		}
	case kFloat64:
		for i := range vs {
			if v := &vs[i]; !v.IsNull() {
				q := unsafe.Add(p, uintptr(i)*stride)
				*(*float64)(q) = v.Double()
			}
		}
	case kBool:
		for i := range vs {
			if v := &vs[i]; !v.IsNull() {
				q := unsafe.Add(p, uintptr(i)*stride)
				*(*bool)(q) = v.Boolean()
			}
		}
	case kPString:
		for i := range vs {
			if v := &vs[i]; !v.IsNull() {
				q := unsafe.Add(p, uintptr(i)*stride)
				s := string(v.ByteArray())
				*(**string)(q) = &s
			}
		}
	case kPInt32:
		for i := range vs {
			if v := &vs[i]; !v.IsNull() {
				q := unsafe.Add(p, uintptr(i)*stride)
				x := v.Int32()
				*(**int32)(q) = &x
			}
		}
	case kPFloat64:
		for i := range vs {
			if v := &vs[i]; !v.IsNull() {
				q := unsafe.Add(p, uintptr(i)*stride)
				x := v.Double()
				*(**float64)(q) = &x
			}
		}
	}
}

// readValues hands the values of a column chunk to each, a run at a time,
// in order. A page that fails to decode — or panics doing so — is an error.
func readValues(chunk parquet.ColumnChunk, buf []parquet.Value, each func([]parquet.Value) error) (err error) {
	c := valueCursor{pages: chunk.Pages(), buf: buf}
	defer func() {
		c.close()
		if p := recover(); p != nil {
			err = fmt.Errorf("decoding a page panicked: %v", p)
		}
	}()
	for {
		vs, err := c.values()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := each(vs); err != nil {
			return err
		}
		c.consume(len(vs))
	}
}
