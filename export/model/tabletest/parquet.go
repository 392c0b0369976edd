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
		if _, ok := lv.(*format.StringType); ok {
			t.Kind = "utf8"
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
