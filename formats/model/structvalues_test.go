package model

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// StructValues give the same table as the maps they stand for: the same
// bytes in Parquet and in an Arrow stream, nulls where a map has no key or
// a nil, nested structs and lists of structs included. The recycled
// builder buffers (several batches) must not change the bytes either.
func TestStructValuesWriteWhatMapsWrite(t *testing.T) {
	str := Value("string")
	msg := Struct{
		{Name: "role", Type: str},
		{Name: "content", Type: str},
		{Name: "calls", Type: List{Item: Struct{{Name: "id", Type: str}, {Name: "fn", Type: Struct{{Name: "name", Type: str}, {Name: "args", Type: str}}}}}},
		{Name: "tail", Type: str},
	}
	fs := Features{{Name: "messages", Type: List{Item: msg}}}
	asMaps := func(i int) []any {
		return []any{
			map[string]any{"role": "user", "content": "hello"},
			map[string]any{"role": "assistant", "content": nil, "calls": []any{map[string]any{"id": "c1", "fn": map[string]any{"name": "exec", "args": `{"cmd":"ls"}`}}}},
			map[string]any{"role": "tool", "content": string(rune('a' + i%26)), "tail": "t"},
		}
	}
	asValues := func(i int) []any {
		return []any{
			StructValues{"user", "hello"},
			StructValues{"assistant", nil, []any{StructValues{"c1", StructValues{"exec", `{"cmd":"ls"}`}}}, nil},
			StructValues{"tool", string(rune('a' + i%26)), nil, "t"},
		}
	}
	for _, stream := range []bool{false, true} {
		write := func(rows func(int) []any) []byte {
			var buf bytes.Buffer
			var tw *TableWriter
			var err error
			if stream {
				tw, err = NewStreamWriter(&buf, fs)
			} else {
				tw, err = NewParquetWriter(&buf, fs)
			}
			require.NoError(t, err)
			tw.BatchRows = 50
			for i := range 300 {
				require.NoError(t, tw.Append(Row{"messages": rows(i)}))
			}
			require.NoError(t, tw.Close())
			return buf.Bytes()
		}
		require.Equal(t, write(asMaps), write(asValues), "stream %v", stream)
	}
	var buf bytes.Buffer
	tw, err := NewParquetWriter(&buf, fs)
	require.NoError(t, err)
	require.ErrorContains(t, tw.Append(Row{"messages": []any{StructValues{"a", "b", nil, nil, "extra"}}}), "struct has 4 fields, got 5 values")
}
