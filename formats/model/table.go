package model

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// Row is one row to append: column name → value. A missing column is null.
// Values by feature:
//
//	Value     string, []byte (binary), bool, any Go integer or float type, or
//	          a pointer to one (nil pointer = null)
//	List      any slice; a nil interface is null, a nil or empty slice is []
//	Struct    map[string]any (missing keys are null), or StructValues
//	Image     []byte of an encoded image (PNG); nil or empty = null
//	JSON      json.RawMessage, []byte or string holding one JSON value, or
//	          ValidJSON (not checked again)
//	          (written as given: key order kept); nil = null
//
// An untyped nil is null everywhere.
type Row map[string]any

// StructValues are a Struct's values in the order of its fields, without
// the names a map[string]any carries (nil is null; a shorter list leaves
// the fields after it null). Building rows of many small structs (a
// conversation's messages) this way skips a map per struct.
type StructValues []any

// Batching: a record batch (a Parquet row group, an IPC record batch) is
// written once it holds this many rows or about this many bytes.
const (
	DefaultBatchRows  = 4096
	DefaultBatchBytes = 32 << 20
)

// TableWriter appends rows of one Features schema to a Parquet file or an
// Arrow IPC stream, one bounded record batch at a time, so memory does not
// grow with the table. It is not safe for concurrent use.
//
// A full batch is encoded (Parquet pages, compression, the write to w) on
// a goroutine of its own while the next one is built, so an export uses two
// cores. At most one batch is in flight: Flush waits for the previous one
// before it hands over the next, so memory holds at most two batches (the
// one encoding and the one building), and the batches reach w in the order
// they were appended — the bytes do not depend on scheduling.
type TableWriter struct {
	features Features
	schema   *arrow.Schema
	index    map[string]int
	rb       *array.RecordBuilder
	pending  int
	bytes    int64
	rows     int64

	BatchRows  int   // rows per batch; DefaultBatchRows when 0
	BatchBytes int64 // approximate bytes per batch; DefaultBatchBytes when 0

	bw  *bufio.Writer
	out *countWriter // under bw: the bytes that reached w
	pq  *pqarrow.FileWriter
	ipc *ipc.Writer
	err error

	// The encoder: batches go in on batches, each one's error comes back
	// on encoded; inflight is the estimated bytes of the batch being
	// encoded (0 when none is), settled what had reached w when it was
	// handed over.
	batches  chan arrow.RecordBatch
	encoded  chan error
	inflight int64
	busy     bool
	settled  int64
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// NewParquetWriter writes a Parquet file to w (zstd, dictionary encoding,
// one row group per batch). The file's key/value metadata carries the
// features under MetadataKey and an ARROW:schema with the exact Arrow types
// (list items named "item", as pyarrow writes it), so pyarrow reads back
// the types datasets expects. w is not closed.
func NewParquetWriter(w io.Writer, fs Features) (*TableWriter, error) {
	t := newTableWriter(w, fs)
	opts := []parquet.WriterProperty{
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithDictionaryDefault(true),
		parquet.WithMaxRowGroupLength(1 << 30),
		parquet.WithAllocator(memory.DefaultAllocator),
	}
	arrowProps := pqarrow.NewArrowWriterProperties()
	plain, err := numberLists(t.schema, arrowProps)
	if err != nil {
		return nil, fmt.Errorf("model: parquet writer: %w", err)
	}
	for _, path := range plain {
		opts = append(opts, parquet.WithDictionaryFor(path, false))
	}
	fw, err := pqarrow.NewFileWriter(t.schema, t.bw, parquet.NewWriterProperties(opts...), arrowProps)
	if err != nil {
		return nil, fmt.Errorf("model: parquet writer: %w", err)
	}
	stored := flight.SerializeSchema(t.schema, memory.DefaultAllocator)
	if err := fw.AppendKeyValueMetadata("ARROW:schema", base64.StdEncoding.EncodeToString(stored)); err != nil {
		return nil, fmt.Errorf("model: parquet writer: %w", err)
	}
	t.pq = fw
	return t, nil
}

// numberLists are the Parquet column paths of the lists of 32- and 64-bit
// numbers in sc (token ids, logprobs): they are written without a
// dictionary. A token id list draws on a vocabulary of 150,000 ids, too few
// for the dictionary to reach its size limit and fall back, so every id was
// looked up in a hash table of that size: a third of the CPU of an export
// to sft-tokens, for files about as large as plain values and zstd make
// them. An int8 mask (two values) and the strings keep the dictionary.
func numberLists(sc *arrow.Schema, props pqarrow.ArrowWriterProperties) ([]string, error) {
	pq, err := pqarrow.ToParquet(sc, parquet.NewWriterProperties(), props)
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range pq.NumColumns() {
		c := pq.Column(i)
		switch c.PhysicalType() {
		case parquet.Types.Int32, parquet.Types.Int64, parquet.Types.Float, parquet.Types.Double:
		default:
			continue
		}
		if c.MaxRepetitionLevel() == 0 {
			continue
		}
		if l, ok := c.LogicalType().(schema.IntLogicalType); ok && l.BitWidth() < 32 {
			continue
		}
		out = append(out, c.Path())
	}
	return out, nil
}

// NewStreamWriter writes an Arrow IPC stream (not the IPC file format) to w,
// uncompressed, as datasets' ArrowWriter does for save_to_disk. w is not
// closed.
func NewStreamWriter(w io.Writer, fs Features) (*TableWriter, error) {
	t := newTableWriter(w, fs)
	t.ipc = ipc.NewWriter(t.bw, ipc.WithSchema(t.schema), ipc.WithAllocator(memory.DefaultAllocator))
	return t, nil
}

func newTableWriter(w io.Writer, fs Features) *TableWriter {
	out := &countWriter{w: w}
	t := &TableWriter{features: fs, schema: fs.ArrowSchema(), index: map[string]int{}, out: out, bw: bufio.NewWriterSize(out, 1<<20)}
	for i, f := range fs {
		t.index[f.Name] = i
	}
	t.rb = array.NewRecordBuilder(&recycler{}, t.schema)
	return t
}

// Schema returns the Arrow schema the writer writes.
func (t *TableWriter) Schema() *arrow.Schema { return t.schema }

// Rows returns the number of rows appended so far.
func (t *TableWriter) Rows() int64 { return t.rows }

// Size is about how big the output is so far: the bytes that had reached
// w when the last batch was handed to the encoder, and the estimated bytes
// of that batch and of the rows not yet handed over. It does not depend on
// how far the encoder has got (a writer that rolls its files by size gets
// the same files on every run).
func (t *TableWriter) Size() int64 { return t.settled + t.inflight + t.bytes }

// Append adds one row. A value that does not fit its feature fails the
// writer: the rows already appended to the current batch are lost.
func (t *TableWriter) Append(r Row) error {
	if t.err != nil {
		return t.err
	}
	for name := range r {
		if _, ok := t.index[name]; !ok {
			t.err = fmt.Errorf("model: row has column %q, which the features do not", name)
			return t.err
		}
	}
	for i, f := range t.features {
		n, err := appendValue(t.rb.Field(i), f.Type, r[f.Name])
		if err != nil {
			t.err = fmt.Errorf("model: column %s: %w", f.Name, err)
			return t.err
		}
		t.bytes += n
	}
	t.pending++
	t.rows++
	rows, bytes := t.BatchRows, t.BatchBytes
	if rows <= 0 {
		rows = DefaultBatchRows
	}
	if bytes <= 0 {
		bytes = DefaultBatchBytes
	}
	if t.pending >= rows || t.bytes >= bytes {
		return t.Flush()
	}
	return nil
}

// Flush hands the pending rows to the encoder as one batch, after the
// batch before it is written; an error of that earlier batch is returned
// here (or by Close).
func (t *TableWriter) Flush() error {
	if t.err != nil || t.pending == 0 {
		return t.err
	}
	if err := t.wait(); err != nil {
		return err
	}
	if t.batches == nil {
		t.batches, t.encoded = make(chan arrow.RecordBatch), make(chan error, 1)
		go t.encode()
	}
	rec := t.rb.NewRecordBatch()
	t.settled, t.inflight, t.busy = t.out.n, t.bytes, true
	t.pending, t.bytes = 0, 0
	t.batches <- rec
	return nil
}

// encode writes the batches it is handed, one at a time, in order.
func (t *TableWriter) encode() {
	for rec := range t.batches {
		var err error
		if t.pq != nil {
			err = t.pq.Write(rec)
		} else {
			err = t.ipc.Write(rec)
		}
		rec.Release()
		t.encoded <- err
	}
}

// wait waits for the batch in flight, if any, to be written.
func (t *TableWriter) wait() error {
	if !t.busy {
		return nil
	}
	err := <-t.encoded
	t.busy, t.inflight = false, 0
	if err != nil && t.err == nil {
		t.err = fmt.Errorf("model: write batch: %w", err)
	}
	return t.err
}

// stop ends the encoder goroutine once nothing is in flight.
func (t *TableWriter) stop() {
	if t.batches != nil {
		close(t.batches)
		t.batches = nil
	}
}

// Close writes the pending rows and the file's footer (or the stream's end
// marker) and flushes to w. A Parquet file or stream without rows is still
// a valid, empty table with the schema.
func (t *TableWriter) Close() error {
	err := t.Flush()
	if werr := t.wait(); err == nil {
		err = werr
	}
	t.stop()
	t.rb.Release()
	if t.pq != nil {
		if cerr := t.pq.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("model: close parquet: %w", cerr)
		}
	} else if cerr := t.ipc.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("model: close stream: %w", cerr)
	}
	if ferr := t.bw.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("model: %w", ferr)
	}
	if err != nil && t.err == nil {
		t.err = err
	}
	return err
}

// appendValue appends v to b as feature f and returns about how many bytes
// it added (for batching).
func appendValue(b array.Builder, f Feature, v any) (int64, error) {
	if v == nil {
		b.AppendNull()
		return 1, nil
	}
	switch f := f.(type) {
	case Value:
		return appendScalar(b, f, v)
	case Image:
		data, ok := v.([]byte)
		if !ok {
			return 0, fmt.Errorf("image wants []byte, got %T", v)
		}
		sb := b.(*array.StructBuilder)
		if len(data) == 0 {
			sb.AppendNull()
			return 1, nil
		}
		sb.Append(true)
		sb.FieldBuilder(0).(*array.BinaryBuilder).Append(data)
		sb.FieldBuilder(1).AppendNull()
		return int64(len(data)) + 8, nil
	case JSON:
		var data []byte
		switch j := v.(type) {
		case ValidJSON:
			if len(j) == 0 {
				b.AppendNull()
				return 1, nil
			}
			b.(*array.ExtensionBuilder).StorageBuilder().(*array.StringBuilder).BinaryBuilder.Append(j)
			return int64(len(j)) + 4, nil
		case json.RawMessage:
			data = j
		case []byte:
			data = j
		case string:
			data = []byte(j)
		default:
			return 0, fmt.Errorf("json wants json.RawMessage, []byte or string, got %T", v)
		}
		if len(data) == 0 {
			b.AppendNull()
			return 1, nil
		}
		if !json.Valid(data) {
			return 0, fmt.Errorf("json value is not valid JSON: %.40q", data)
		}
		b.(*array.ExtensionBuilder).StorageBuilder().(*array.StringBuilder).BinaryBuilder.Append(data)
		return int64(len(data)) + 4, nil
	case List:
		return appendList(b.(*array.ListBuilder), f, v)
	case Struct:
		if sv, ok := v.(StructValues); ok {
			if len(sv) > len(f) {
				return 0, fmt.Errorf("struct has %d fields, got %d values", len(f), len(sv))
			}
			sb := b.(*array.StructBuilder)
			sb.Append(true)
			var n int64 = 1
			for i, c := range f {
				var fv any
				if i < len(sv) {
					fv = sv[i]
				}
				cn, err := appendValue(sb.FieldBuilder(i), c.Type, fv)
				if err != nil {
					return 0, fmt.Errorf("%s: %w", c.Name, err)
				}
				n += cn
			}
			return n, nil
		}
		m, ok := v.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("struct wants map[string]any or StructValues, got %T", v)
		}
		for k := range m {
			if !slices.ContainsFunc(f, func(c Field) bool { return c.Name == k }) {
				return 0, fmt.Errorf("struct has no field %q", k)
			}
		}
		sb := b.(*array.StructBuilder)
		sb.Append(true)
		var n int64 = 1
		for i, c := range f {
			cn, err := appendValue(sb.FieldBuilder(i), c.Type, m[c.Name])
			if err != nil {
				return 0, fmt.Errorf("%s: %w", c.Name, err)
			}
			n += cn
		}
		return n, nil
	}
	return 0, fmt.Errorf("unknown feature %T", f)
}

func appendList(lb *array.ListBuilder, f List, v any) (int64, error) {
	vb := lb.ValueBuilder()
	// Fast paths for token columns.
	switch s := v.(type) {
	case []int32:
		if ib, ok := vb.(*array.Int32Builder); ok {
			lb.Append(true)
			ib.AppendValues(s, nil)
			return int64(4*len(s)) + 4, nil
		}
	case []float32:
		if fb, ok := vb.(*array.Float32Builder); ok {
			lb.Append(true)
			fb.AppendValues(s, nil)
			return int64(4*len(s)) + 4, nil
		}
	case []int8:
		if ib, ok := vb.(*array.Int8Builder); ok {
			lb.Append(true)
			ib.AppendValues(s, nil)
			return int64(len(s)) + 4, nil
		}
	}
	if items, ok := v.([]any); ok {
		// The common shape (rows built of []any), without reflection.
		lb.Append(true)
		var n int64 = 4
		for i, it := range items {
			en, err := appendValue(vb, f.Item, it)
			if err != nil {
				return 0, fmt.Errorf("item %d: %w", i, err)
			}
			n += en
		}
		return n, nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice {
		return 0, fmt.Errorf("list wants a slice, got %T", v)
	}
	lb.Append(true)
	var n int64 = 4
	for i := range rv.Len() {
		en, err := appendValue(vb, f.Item, rv.Index(i).Interface())
		if err != nil {
			return 0, fmt.Errorf("item %d: %w", i, err)
		}
		n += en
	}
	return n, nil
}

func appendScalar(b array.Builder, dtype Value, v any) (int64, error) {
	// The common Go types without reflection; anything else takes the
	// general path below, which gives the same values.
	switch x := v.(type) {
	case string:
		if bb, ok := b.(*array.StringBuilder); ok {
			bb.Append(x)
			return int64(len(x)) + 4, nil
		}
	case *string:
		if bb, ok := b.(*array.StringBuilder); ok {
			if x == nil {
				bb.AppendNull()
				return 1, nil
			}
			bb.Append(*x)
			return int64(len(*x)) + 4, nil
		}
	case bool:
		if bb, ok := b.(*array.BooleanBuilder); ok {
			bb.Append(x)
			return 1, nil
		}
	case float64:
		if bb, ok := b.(*array.Float64Builder); ok {
			bb.Append(x)
			return 8, nil
		}
	case *float64:
		if bb, ok := b.(*array.Float64Builder); ok {
			if x == nil {
				bb.AppendNull()
				return 1, nil
			}
			bb.Append(*x)
			return 8, nil
		}
	case int32:
		if bb, ok := b.(*array.Int32Builder); ok {
			bb.Append(x)
			return 8, nil
		}
	case int64:
		if bb, ok := b.(*array.Int64Builder); ok {
			bb.Append(x)
			return 8, nil
		}
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			b.AppendNull()
			return 1, nil
		}
		rv = rv.Elem()
	}
	bad := func() (int64, error) { return 0, fmt.Errorf("%s wants a matching Go value, got %T", dtype, v) }
	switch bb := b.(type) {
	case *array.StringBuilder:
		if rv.Kind() != reflect.String {
			return bad()
		}
		bb.Append(rv.String())
		return int64(rv.Len()) + 4, nil
	case *array.BinaryBuilder:
		if rv.Kind() != reflect.Slice || rv.Type().Elem().Kind() != reflect.Uint8 {
			return bad()
		}
		bb.Append(rv.Bytes())
		return int64(rv.Len()) + 4, nil
	case *array.BooleanBuilder:
		if rv.Kind() != reflect.Bool {
			return bad()
		}
		bb.Append(rv.Bool())
		return 1, nil
	case *array.Float32Builder:
		if !rv.CanFloat() {
			return bad()
		}
		bb.Append(float32(rv.Float()))
		return 4, nil
	case *array.Float64Builder:
		if !rv.CanFloat() {
			return bad()
		}
		bb.Append(rv.Float())
		return 8, nil
	}
	var i int64
	switch {
	case rv.CanInt():
		i = rv.Int()
	case rv.CanUint():
		i = int64(rv.Uint())
	default:
		return bad()
	}
	switch bb := b.(type) {
	case *array.Int8Builder:
		if int64(int8(i)) != i {
			return 0, fmt.Errorf("%d overflows int8", i)
		}
		bb.Append(int8(i))
	case *array.Int16Builder:
		if int64(int16(i)) != i {
			return 0, fmt.Errorf("%d overflows int16", i)
		}
		bb.Append(int16(i))
	case *array.Int32Builder:
		if int64(int32(i)) != i {
			return 0, fmt.Errorf("%d overflows int32", i)
		}
		bb.Append(int32(i))
	case *array.Int64Builder:
		bb.Append(i)
	default:
		return bad()
	}
	return 8, nil
}
