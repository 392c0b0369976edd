package tabletest

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// ReadParquetFile reads a Parquet file with parquet-go. Fields are the Arrow
// types pyarrow infers from the Parquet schema when no ARROW:schema is
// stored (list items take the Parquet element's name); Metadata is the
// file's key/value metadata; values are normalized (see Normalize).
func ReadParquetFile(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("tabletest: %s: %w", path, err)
	}
	t := &Table{Metadata: map[string]string{}, Batches: len(pf.RowGroups())}
	for _, kv := range pf.Metadata().KeyValueMetadata {
		t.Metadata[kv.Key] = kv.Value
	}
	root := pf.Schema()
	for _, f := range root.Fields() {
		ft, err := inferType(f)
		if err != nil {
			return nil, fmt.Errorf("tabletest: %s: %w", path, err)
		}
		t.Fields = append(t.Fields, ft)
	}
	jsonCols, err := jsonColumns(root, t.Fields)
	if err != nil {
		return nil, fmt.Errorf("tabletest: %s: %w", path, err)
	}
	r := parquet.NewReader(pf)
	defer r.Close()
	buf := make([]parquet.Row, 64)
	for {
		n, err := r.ReadRows(buf)
		for _, row := range buf[:n] {
			m := map[string]any{}
			if err := root.Reconstruct(&m, row); err != nil {
				return nil, fmt.Errorf("tabletest: %s: %w", path, err)
			}
			for _, jc := range jsonCols {
				m[jc.field] = jc.assemble(row)
			}
			for _, f := range t.Fields {
				m[f.Name] = Normalize(m[f.Name], f)
			}
			t.Rows = append(t.Rows, m)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tabletest: %s: %w", path, err)
		}
	}
	if int64(len(t.Rows)) != pf.NumRows() {
		return nil, fmt.Errorf("tabletest: %s: read %d rows, the footer says %d", path, len(t.Rows), pf.NumRows())
	}
	return t, nil
}

// jsonColumn is a top-level JSON column, or a top-level list of JSON: its
// values are taken as the stored text (parquet-go's Reconstruct decodes
// JSON into maps, which loses the key order a chat template renders).
type jsonColumn struct {
	field  string
	column int  // leaf column index
	list   bool // list<json>: optional group, repeated group, optional leaf
}

func jsonColumns(root *parquet.Schema, fields []Type) ([]jsonColumn, error) {
	var out []jsonColumn
	for _, f := range fields {
		var isList bool
		switch {
		case f.Extension == "arrow.json":
		case f.Kind == "list" && f.Children[0].Extension == "arrow.json":
			isList = true
		default:
			if hasJSON(f) {
				return nil, fmt.Errorf("%s: JSON below the top level or a list is not read here", f.Name)
			}
			continue
		}
		leaf, ok := root.Lookup(leafPath(root, f.Name)...)
		if !ok {
			return nil, fmt.Errorf("%s: leaf column not found", f.Name)
		}
		out = append(out, jsonColumn{field: f.Name, column: leaf.ColumnIndex, list: isList})
	}
	return out, nil
}

func hasJSON(t Type) bool {
	if t.Extension == "arrow.json" {
		return true
	}
	for _, c := range t.Children {
		if hasJSON(c) {
			return true
		}
	}
	return false
}

// leafPath is the path of the one leaf under a top-level field.
func leafPath(root *parquet.Schema, name string) []string {
	path := []string{name}
	var n parquet.Field
	for _, f := range root.Fields() {
		if f.Name() == name {
			n = f
		}
	}
	for n != nil && !n.Leaf() && len(n.Fields()) == 1 {
		n = n.Fields()[0]
		path = append(path, n.Name())
	}
	return path
}

// assemble reads the column's values out of a row by their definition and
// repetition levels.
func (jc jsonColumn) assemble(row parquet.Row) any {
	var vals []parquet.Value
	for _, v := range row {
		if v.Column() == jc.column {
			vals = append(vals, v)
		}
	}
	if !jc.list {
		if len(vals) == 0 || vals[0].IsNull() {
			return nil
		}
		return string(vals[0].ByteArray())
	}
	// list<json>: definition 0 null list, 1 empty list, 2 null item, 3 item.
	if len(vals) == 0 || vals[0].DefinitionLevel() == 0 {
		return nil
	}
	out := []any{}
	if vals[0].DefinitionLevel() == 1 {
		return out
	}
	for _, v := range vals {
		if v.DefinitionLevel() < 3 {
			out = append(out, nil)
			continue
		}
		out = append(out, string(v.ByteArray()))
	}
	return out
}

// StoredArrowSchema decodes the ARROW:schema a Parquet file's metadata
// carries (base64 of an IPC schema message), which pyarrow prefers to
// inference when present.
func StoredArrowSchema(t *Table) (*Table, error) {
	v, ok := t.Metadata["ARROW:schema"]
	if !ok {
		return nil, errors.New("tabletest: no ARROW:schema in the metadata")
	}
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("tabletest: ARROW:schema: %w", err)
	}
	return DecodeSchemaMessage(raw)
}

// inferType maps a Parquet node to the Arrow field pyarrow reads it as.
func inferType(n parquet.Field) (Type, error) {
	t := Type{Name: n.Name(), Nullable: n.Optional()}
	if n.Repeated() {
		return t, fmt.Errorf("%s: bare repeated fields are not produced by Arrow writers", n.Name())
	}
	var lv format.LogicalTypeValue
	if lt := n.Type().LogicalType(); lt != nil {
		lv = lt.Value
	}
	if !n.Leaf() {
		if _, ok := lv.(*format.ListType); ok {
			// LIST: optional group (LIST) { repeated group list { <element> } }
			rep := n.Fields()
			if len(rep) != 1 || !rep[0].Repeated() || len(rep[0].Fields()) != 1 {
				return t, fmt.Errorf("%s: not a three-level LIST", n.Name())
			}
			item, err := inferType(rep[0].Fields()[0])
			if err != nil {
				return t, err
			}
			t.Kind, t.Children = "list", []Type{item}
			return t, nil
		}
		if _, ok := lv.(*format.MapType); ok {
			return t, fmt.Errorf("%s: maps are not produced here", n.Name())
		}
		t.Kind = "struct"
		for _, c := range n.Fields() {
			ct, err := inferType(c)
			if err != nil {
				return t, err
			}
			t.Children = append(t.Children, ct)
		}
		return t, nil
	}
	switch n.Type().Kind() {
	case parquet.Boolean:
		t.Kind = "bool"
	case parquet.Int32:
		t.Kind = "int32"
		if it, ok := lv.(*format.IntType); ok {
			if !it.IsSigned {
				return t, fmt.Errorf("%s: unsigned", n.Name())
			}
			t.Kind = fmt.Sprintf("int%d", it.BitWidth)
		}
	case parquet.Int64:
		t.Kind = "int64"
	case parquet.Float:
		t.Kind = "float32"
	case parquet.Double:
		t.Kind = "float64"
	case parquet.ByteArray:
		t.Kind = "binary"
		switch lv.(type) {
		case *format.StringType:
			t.Kind = "utf8"
		case *format.JsonType:
			// A JSON column: pyarrow reads it as utf8, and as arrow.json
			// over utf8 when the ARROW:schema stored in the file says so
			// (or with arrow_extensions_enabled), which is what datasets'
			// Json feature compares with; StoredArrowSchema checks that
			// the stored schema does.
			t.Kind, t.Extension = "utf8", "arrow.json"
		}
	default:
		return t, fmt.Errorf("%s: physical type %v not expected", n.Name(), n.Type().Kind())
	}
	return t, nil
}

// Normalize brings a decoded value into one form whichever reader produced
// it: nil, string (utf8), []byte (binary), bool, int64, float64, []any, or
// map[string]any.
func Normalize(v any, t Type) any {
	if v == nil {
		return nil
	}
	switch t.Kind {
	case "utf8", "large_utf8":
		switch x := v.(type) {
		case string:
			return x
		case []byte:
			return string(x)
		}
	case "binary", "large_binary":
		switch x := v.(type) {
		case string:
			return []byte(x)
		case []byte:
			return x
		}
	case "bool":
		return v
	case "int8", "int16", "int32", "int64":
		switch x := v.(type) {
		case int8:
			return int64(x)
		case int16:
			return int64(x)
		case int32:
			return int64(x)
		case int64:
			return x
		case int:
			return int64(x)
		}
	case "float32", "float64":
		switch x := v.(type) {
		case float32:
			return float64(x)
		case float64:
			return x
		}
	case "list", "large_list":
		if s, ok := v.([]any); ok {
			out := make([]any, len(s))
			for i := range s {
				out[i] = Normalize(s[i], t.Children[0])
			}
			return out
		}
	case "struct":
		if m, ok := v.(map[string]any); ok {
			out := map[string]any{}
			for _, c := range t.Children {
				out[c.Name] = Normalize(m[c.Name], c)
			}
			return out
		}
	}
	return v
}
