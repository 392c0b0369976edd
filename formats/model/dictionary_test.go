package model

import (
	"bytes"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Lists of 32- and 64-bit numbers (token ids, logprobs) are written
// without a dictionary; strings and an int8 mask keep theirs. Read with
// parquet-go, not the writer's library: which encodings each column chunk
// says it holds.
func TestNumberListsHaveNoDictionary(t *testing.T) {
	fs := Features{
		{"prompt_ids", List{Value("int32")}},
		{"response_logprobs", List{Value("float32")}},
		{"response_mask", List{Value("int8")}},
		{"task_id", Value("string")},
		{"steps", Value("int32")},
	}
	var buf bytes.Buffer
	tw, err := NewParquetWriter(&buf, fs)
	require.NoError(t, err)
	for i := range 500 {
		require.NoError(t, tw.Append(Row{
			"prompt_ids": []int32{int32(i), int32(i % 7), 151643}, "response_logprobs": []float32{-0.5, float32(-i)},
			"response_mask": []int8{0, 1, 1}, "task_id": "task-" + string(rune('a'+i%3)), "steps": int32(i % 4),
		}))
	}
	require.NoError(t, tw.Close())

	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	require.NoError(t, err)
	dictionary := map[string]bool{}
	for _, rg := range f.Metadata().RowGroups {
		for _, c := range rg.Columns {
			name := strings.Join(c.MetaData.PathInSchema, ".")
			for _, e := range c.MetaData.Encoding {
				if e == format.RLEDictionary {
					dictionary[name] = true
				}
			}
			if c.MetaData.DictionaryPageOffset != 0 {
				dictionary[name] = true
			}
		}
	}
	assert.Equal(t, map[string]bool{"response_mask.list.element": true, "task_id": true, "steps": true}, dictionary)
}
