package tabletest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
)

// This file is a minimal reader of the Arrow IPC *stream* format, written
// from the Arrow columnar format specification (Message.fbs, Schema.fbs and
// the encapsulated message format) so that tests do not read arrow-go's
// output with arrow-go. It reads uncompressed streams without dictionaries
// or views: what datasets' save_to_disk writes.

// Table is a decoded table: its fields, schema metadata and rows, each row
// a map from column name to a value (see Normalize for the value forms).
type Table struct {
	Fields   []Type
	Metadata map[string]string
	Rows     []map[string]any
	Batches  int // record batches (IPC) or row groups (Parquet)
}

// Field returns the named field.
func (t *Table) Field(name string) (Type, bool) {
	for _, f := range t.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Type{}, false
}

// ReadStreamFile decodes an Arrow IPC stream file. It fails on the IPC file
// format ("ARROW1" magic), which datasets' load_from_disk does not read.
func ReadStreamFile(path string) (*Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ReadStream(data)
}

// ReadStream decodes an Arrow IPC stream.
func ReadStream(data []byte) (*Table, error) {
	if len(data) >= 6 && string(data[:6]) == "ARROW1" {
		return nil, errors.New("tabletest: this is the Arrow IPC file format, not a stream")
	}
	var t *Table
	pos := 0
	for {
		meta, body, next, err := nextMessage(data, pos)
		if err != nil {
			return nil, err
		}
		if meta == nil { // end of stream
			if next != len(data) {
				return nil, fmt.Errorf("tabletest: %d bytes after the end-of-stream marker", len(data)-next)
			}
			break
		}
		pos = next
		msg := fbRoot(meta)
		switch msg.u8(1) {
		case 1: // Schema
			if t != nil {
				return nil, errors.New("tabletest: a second schema message")
			}
			t, err = decodeSchema(msg.table(2))
			if err != nil {
				return nil, err
			}
		case 3: // RecordBatch
			if t == nil {
				return nil, errors.New("tabletest: record batch before the schema")
			}
			if err := decodeBatch(t, msg.table(2), body); err != nil {
				return nil, err
			}
			t.Batches++
		default:
			return nil, fmt.Errorf("tabletest: message header type %d not supported", msg.u8(1))
		}
	}
	if t == nil {
		return nil, errors.New("tabletest: stream has no schema")
	}
	return t, nil
}

// DecodeSchemaMessage decodes a serialized schema (an encapsulated Schema
// message, optionally followed by an end-of-stream marker), as stored in
// Parquet's ARROW:schema (base64-decoded).
func DecodeSchemaMessage(data []byte) (*Table, error) {
	meta, _, _, err := nextMessage(data, 0)
	if err != nil {
		return nil, err
	}
	if meta == nil {
		return nil, errors.New("tabletest: empty schema message")
	}
	msg := fbRoot(meta)
	if msg.u8(1) != 1 {
		return nil, fmt.Errorf("tabletest: message type %d is not a schema", msg.u8(1))
	}
	return decodeSchema(msg.table(2))
}

// nextMessage reads the encapsulated message at pos: continuation marker,
// metadata length, flatbuffer Message, body. meta is nil at end of stream.
func nextMessage(data []byte, pos int) (meta, body []byte, next int, err error) {
	if pos+8 > len(data) {
		return nil, nil, 0, fmt.Errorf("tabletest: stream ends at byte %d without an end-of-stream marker", pos)
	}
	if binary.LittleEndian.Uint32(data[pos:]) != 0xFFFFFFFF {
		return nil, nil, 0, fmt.Errorf("tabletest: no continuation marker at byte %d", pos)
	}
	n := int(int32(binary.LittleEndian.Uint32(data[pos+4:])))
	pos += 8
	if n == 0 {
		return nil, nil, pos, nil
	}
	if n < 0 || pos+n > len(data) || n%8 != 0 {
		return nil, nil, 0, fmt.Errorf("tabletest: bad metadata length %d at byte %d", n, pos-4)
	}
	meta = data[pos : pos+n]
	pos += n
	bodyLen := int(fbRoot(meta).i64(3))
	if bodyLen < 0 || pos+bodyLen > len(data) {
		return nil, nil, 0, fmt.Errorf("tabletest: bad body length %d", bodyLen)
	}
	return meta, data[pos : pos+bodyLen], pos + bodyLen, nil
}

func decodeSchema(s fbTable) (*Table, error) {
	t := &Table{Metadata: map[string]string{}}
	if s.u16(0) != 0 {
		return nil, errors.New("tabletest: big-endian schema")
	}
	for _, f := range s.tables(1) {
		ft, err := decodeField(f)
		if err != nil {
			return nil, err
		}
		t.Fields = append(t.Fields, ft)
	}
	for _, kv := range s.tables(2) {
		t.Metadata[kv.str(0)] = kv.str(1)
	}
	return t, nil
}

func decodeField(f fbTable) (Type, error) {
	t := Type{Name: f.str(0), Nullable: f.bool(1)}
	if f.has(4) {
		return t, fmt.Errorf("tabletest: field %s is dictionary-encoded", t.Name)
	}
	typ := f.table(3)
	switch f.u8(2) {
	case 2: // Int
		bits, signed := typ.i32(0), typ.bool(1)
		if !signed {
			return t, fmt.Errorf("tabletest: field %s: unsigned ints not supported", t.Name)
		}
		t.Kind = fmt.Sprintf("int%d", bits)
	case 3: // FloatingPoint
		t.Kind = [...]string{"float16", "float32", "float64"}[typ.u16(0)]
	case 4:
		t.Kind = "binary"
	case 5:
		t.Kind = "utf8"
	case 6:
		t.Kind = "bool"
	case 12:
		t.Kind = "list"
	case 13:
		t.Kind = "struct"
	case 19:
		t.Kind = "large_binary"
	case 20:
		t.Kind = "large_utf8"
	case 21:
		t.Kind = "large_list"
	default:
		t.Kind = fmt.Sprintf("other:%d", f.u8(2))
	}
	for _, c := range f.tables(5) {
		ct, err := decodeField(c)
		if err != nil {
			return t, err
		}
		t.Children = append(t.Children, ct)
	}
	for _, kv := range f.tables(6) { // custom_metadata
		if kv.str(0) == "ARROW:extension:name" {
			t.Extension = kv.str(1)
		}
	}
	return t, nil
}

// batchReader walks a record batch's field nodes and buffers in order.
type batchReader struct {
	body    []byte
	nodes   []fbStruct
	buffers []fbStruct
	ni, bi  int
}

func (r *batchReader) node() (length, nulls int64, err error) {
	if r.ni >= len(r.nodes) {
		return 0, 0, errors.New("tabletest: record batch has too few field nodes")
	}
	n := r.nodes[r.ni]
	r.ni++
	return n.i64(0), n.i64(8), nil
}

func (r *batchReader) buffer() ([]byte, error) {
	if r.bi >= len(r.buffers) {
		return nil, errors.New("tabletest: record batch has too few buffers")
	}
	b := r.buffers[r.bi]
	r.bi++
	off, n := b.i64(0), b.i64(8)
	if off < 0 || n < 0 || off+n > int64(len(r.body)) {
		return nil, fmt.Errorf("tabletest: buffer [%d, +%d) outside the body of %d bytes", off, n, len(r.body))
	}
	return r.body[off : off+n], nil
}

func decodeBatch(t *Table, rb fbTable, body []byte) error {
	if rb.has(3) {
		return errors.New("tabletest: compressed record batches are not supported")
	}
	length := rb.i64(0)
	r := &batchReader{body: body, nodes: rb.structs(1, 16), buffers: rb.structs(2, 16)}
	cols := make([][]any, len(t.Fields))
	for i, f := range t.Fields {
		vals, err := r.column(f)
		if err != nil {
			return fmt.Errorf("tabletest: column %s: %w", f.Name, err)
		}
		if int64(len(vals)) != length {
			return fmt.Errorf("tabletest: column %s has %d values, the batch %d", f.Name, len(vals), length)
		}
		cols[i] = vals
	}
	if r.ni != len(r.nodes) || r.bi != len(r.buffers) {
		return fmt.Errorf("tabletest: batch has %d nodes and %d buffers, the schema used %d and %d", len(r.nodes), len(r.buffers), r.ni, r.bi)
	}
	for i := range length {
		row := map[string]any{}
		for c, f := range t.Fields {
			row[f.Name] = cols[c][i]
		}
		t.Rows = append(t.Rows, row)
	}
	return nil
}

// column decodes one field's values (and its children's) in buffer order.
func (r *batchReader) column(f Type) ([]any, error) {
	n, nulls, err := r.node()
	if err != nil {
		return nil, err
	}
	validity, err := r.buffer()
	if err != nil {
		return nil, err
	}
	valid := func(i int64) bool {
		if nulls == 0 || len(validity) == 0 {
			return true
		}
		return validity[i/8]&(1<<(i%8)) != 0
	}
	out := make([]any, n)
	switch f.Kind {
	case "utf8", "binary", "large_utf8", "large_binary":
		offsets, err := r.buffer()
		if err != nil {
			return nil, err
		}
		data, err := r.buffer()
		if err != nil {
			return nil, err
		}
		large := strings.HasPrefix(f.Kind, "large_")
		if n > 0 && int64(len(offsets)) < offsetWidth(large)*(n+1) {
			return nil, errors.New("offsets buffer too short")
		}
		for i := range n {
			if !valid(i) {
				continue
			}
			a, b := offsetAt(offsets, i, large), offsetAt(offsets, i+1, large)
			if a > b || b > int64(len(data)) {
				return nil, fmt.Errorf("bad offsets %d..%d", a, b)
			}
			if f.Kind == "utf8" || f.Kind == "large_utf8" {
				out[i] = string(data[a:b])
			} else {
				out[i] = append([]byte{}, data[a:b]...)
			}
		}
	case "bool":
		data, err := r.buffer()
		if err != nil {
			return nil, err
		}
		for i := range n {
			if valid(i) {
				out[i] = data[i/8]&(1<<(i%8)) != 0
			}
		}
	case "int8", "int16", "int32", "int64", "float32", "float64":
		data, err := r.buffer()
		if err != nil {
			return nil, err
		}
		width := map[string]int64{"int8": 1, "int16": 2, "int32": 4, "int64": 8, "float32": 4, "float64": 8}[f.Kind]
		if int64(len(data)) < width*n {
			return nil, errors.New("values buffer too short")
		}
		for i := range n {
			if !valid(i) {
				continue
			}
			p := data[width*i:]
			switch f.Kind {
			case "int8":
				out[i] = int64(int8(p[0]))
			case "int16":
				out[i] = int64(int16(binary.LittleEndian.Uint16(p)))
			case "int32":
				out[i] = int64(int32(binary.LittleEndian.Uint32(p)))
			case "int64":
				out[i] = int64(binary.LittleEndian.Uint64(p))
			case "float32":
				out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(p)))
			case "float64":
				out[i] = math.Float64frombits(binary.LittleEndian.Uint64(p))
			}
		}
	case "list", "large_list":
		offsets, err := r.buffer()
		if err != nil {
			return nil, err
		}
		items, err := r.column(f.Children[0])
		if err != nil {
			return nil, err
		}
		large := f.Kind == "large_list"
		if n > 0 && int64(len(offsets)) < offsetWidth(large)*(n+1) {
			return nil, errors.New("offsets buffer too short")
		}
		for i := range n {
			if !valid(i) {
				continue
			}
			a, b := offsetAt(offsets, i, large), offsetAt(offsets, i+1, large)
			if a > b || b > int64(len(items)) {
				return nil, fmt.Errorf("bad list offsets %d..%d of %d items", a, b, len(items))
			}
			out[i] = append([]any{}, items[a:b]...)
		}
	case "struct":
		children := make([][]any, len(f.Children))
		for c, ct := range f.Children {
			if children[c], err = r.column(ct); err != nil {
				return nil, fmt.Errorf("%s: %w", ct.Name, err)
			}
			if int64(len(children[c])) < n {
				return nil, fmt.Errorf("%s: %d values for %d structs", ct.Name, len(children[c]), n)
			}
		}
		for i := range n {
			if !valid(i) {
				continue
			}
			m := map[string]any{}
			for c, ct := range f.Children {
				m[ct.Name] = children[c][i]
			}
			out[i] = m
		}
	default:
		return nil, fmt.Errorf("type %s not supported", f.Kind)
	}
	return out, nil
}

func offsetWidth(large bool) int64 {
	if large {
		return 8
	}
	return 4
}

// offsetAt reads offset i of an int32 (or, large, int64) offsets buffer.
func offsetAt(offsets []byte, i int64, large bool) int64 {
	if large {
		return int64(binary.LittleEndian.Uint64(offsets[8*i:]))
	}
	return int64(int32(binary.LittleEndian.Uint32(offsets[4*i:])))
}

// Flatbuffers, just enough to read Arrow messages.

type fbTable struct {
	buf []byte
	pos int
}

type fbStruct struct {
	buf []byte
	pos int
}

func fbRoot(buf []byte) fbTable {
	return fbTable{buf: buf, pos: int(binary.LittleEndian.Uint32(buf))}
}

// field returns the absolute position of field i, or 0 when absent.
func (t fbTable) field(i int) int {
	if t.pos < 0 {
		return 0
	}
	vt := t.pos - int(int32(binary.LittleEndian.Uint32(t.buf[t.pos:])))
	vtLen := int(binary.LittleEndian.Uint16(t.buf[vt:]))
	at := 4 + 2*i
	if at+2 > vtLen {
		return 0
	}
	off := int(binary.LittleEndian.Uint16(t.buf[vt+at:]))
	if off == 0 {
		return 0
	}
	return t.pos + off
}

func (t fbTable) has(i int) bool { return t.field(i) != 0 }

func (t fbTable) u8(i int) uint8 {
	if p := t.field(i); p != 0 {
		return t.buf[p]
	}
	return 0
}

func (t fbTable) bool(i int) bool { return t.u8(i) != 0 }

func (t fbTable) u16(i int) uint16 {
	if p := t.field(i); p != 0 {
		return binary.LittleEndian.Uint16(t.buf[p:])
	}
	return 0
}

func (t fbTable) i32(i int) int32 {
	if p := t.field(i); p != 0 {
		return int32(binary.LittleEndian.Uint32(t.buf[p:]))
	}
	return 0
}

func (t fbTable) i64(i int) int64 {
	if p := t.field(i); p != 0 {
		return int64(binary.LittleEndian.Uint64(t.buf[p:]))
	}
	return 0
}

func (t fbTable) deref(p int) int { return p + int(binary.LittleEndian.Uint32(t.buf[p:])) }

func (t fbTable) table(i int) fbTable {
	p := t.field(i)
	if p == 0 {
		return fbTable{buf: t.buf, pos: -1}
	}
	return fbTable{buf: t.buf, pos: t.deref(p)}
}

func (t fbTable) str(i int) string {
	p := t.field(i)
	if p == 0 {
		return ""
	}
	s := t.deref(p)
	n := int(binary.LittleEndian.Uint32(t.buf[s:]))
	return string(t.buf[s+4 : s+4+n])
}

func (t fbTable) tables(i int) []fbTable {
	p := t.field(i)
	if p == 0 {
		return nil
	}
	v := t.deref(p)
	n := int(binary.LittleEndian.Uint32(t.buf[v:]))
	out := make([]fbTable, n)
	for k := range n {
		e := v + 4 + 4*k
		out[k] = fbTable{buf: t.buf, pos: t.deref(e)}
	}
	return out
}

func (t fbTable) structs(i, size int) []fbStruct {
	p := t.field(i)
	if p == 0 {
		return nil
	}
	v := t.deref(p)
	n := int(binary.LittleEndian.Uint32(t.buf[v:]))
	out := make([]fbStruct, n)
	for k := range n {
		out[k] = fbStruct{buf: t.buf, pos: v + 4 + size*k}
	}
	return out
}

func (s fbStruct) i64(off int) int64 { return int64(binary.LittleEndian.Uint64(s.buf[s.pos+off:])) }
