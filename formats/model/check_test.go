package model

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/model/tabletest"
)

// The checks are not vacuous: files whose Arrow types differ from their
// features (what datasets would silently re-infer) fail them.
func TestFeatureCheckCatchesMismatches(t *testing.T) {
	md := Features{{Name: "text", Type: Value("string")}, {Name: "ids", Type: List{Value("int32")}}}.MetadataJSON()
	for _, tc := range []struct {
		name   string
		fields []arrow.Field
		msg    string
	}{
		{"not nullable", []arrow.Field{
			{Name: "text", Type: arrow.BinaryTypes.String},
			{Name: "ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true}}, "nullable"},
		{"large string", []arrow.Field{
			{Name: "text", Type: arrow.BinaryTypes.LargeString, Nullable: true},
			{Name: "ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true}}, "large_utf8"},
		{"wider ints", []arrow.Field{
			{Name: "text", Type: arrow.BinaryTypes.String, Nullable: true},
			{Name: "ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true}}, "int64"},
		{"required items", []arrow.Field{
			{Name: "text", Type: arrow.BinaryTypes.String, Nullable: true},
			{Name: "ids", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32), Nullable: true}}, "nullable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta := arrow.NewMetadata([]string{MetadataKey}, []string{md})
			schema := arrow.NewSchema(tc.fields, &meta)
			rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
			defer rb.Release()
			switch b := rb.Field(0).(type) {
			case *array.StringBuilder:
				b.Append("x")
			case *array.LargeStringBuilder:
				b.Append("x")
			}
			lb := rb.Field(1).(*array.ListBuilder)
			lb.Append(true)
			switch b := lb.ValueBuilder().(type) {
			case *array.Int32Builder:
				b.Append(1)
			case *array.Int64Builder:
				b.Append(1)
			}
			rec := rb.NewRecordBatch()
			defer rec.Release()

			var stream bytes.Buffer
			w := ipc.NewWriter(&stream, ipc.WithSchema(schema))
			require.NoError(t, w.Write(rec))
			require.NoError(t, w.Close())
			tab, err := tabletest.ReadStream(stream.Bytes())
			require.NoError(t, err)
			require.ErrorContains(t, tabletest.CheckFeatures(tab, true), tc.msg, "stream")

			path := filepath.Join(t.TempDir(), "x.parquet")
			f, err := os.Create(path)
			require.NoError(t, err)
			pw, err := pqarrow.NewFileWriter(schema, f, nil, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
			require.NoError(t, err)
			require.NoError(t, pw.Write(rec))
			require.NoError(t, pw.Close())
			tab, err = tabletest.ReadParquetFile(path)
			require.NoError(t, err)
			stored, err := tabletest.StoredArrowSchema(tab)
			require.NoError(t, err)
			want, err := tabletest.FeatureTypes(md)
			require.NoError(t, err)
			require.Error(t, tabletest.CheckFields(want, stored.Fields, false), "parquet ARROW:schema")
		})
	}
}

// load_from_disk opens shards as IPC streams; the IPC file format is
// refused by the reader the tests use.
func TestStreamReaderRefusesTheFileFormat(t *testing.T) {
	schema := Features{{Name: "text", Type: Value("string")}}.ArrowSchema()
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(schema))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	_, err = tabletest.ReadStream(buf.Bytes())
	require.ErrorContains(t, err, "file format")
}

func TestAppendRejectsWhatDoesNotFit(t *testing.T) {
	var buf bytes.Buffer
	tw, err := NewParquetWriter(&buf, Features{{"n", Value("int8")}})
	require.NoError(t, err)
	require.ErrorContains(t, tw.Append(Row{"n": 300}), "overflows int8")
	tw, _ = NewParquetWriter(&buf, Features{{"n", Value("int8")}})
	require.ErrorContains(t, tw.Append(Row{"m": 1}), `column "m"`)
}

// The Json feature (hf's messages and tools) is stored as datasets stores
// pa.json_(): a Parquet JSON column whose ARROW:schema names the arrow.json
// extension, an IPC field with the extension metadata; the values are the
// exact JSON given, key order kept. Read back by parquet-go, the IPC reader
// written here, and arrow-go itself.
func TestJSONFeature(t *testing.T) {
	fs := Features{{Name: "messages", Type: List{Item: JSON{}}}, {Name: "tool", Type: JSON{}}}
	rows := []Row{
		{"messages": []any{json.RawMessage(`{"role":"user","content":"hi"}`), json.RawMessage(`{"role":"assistant","content":"","tool_calls":[{"function":{"name":"exec","arguments":{"cmd":"ls"}}}]}`)},
			"tool": json.RawMessage(`{"type":"function","function":{"name":"exec"}}`)},
		{"messages": []any{}, "tool": nil},
	}
	assert.Equal(t, `{"messages":[{"_type":"Json"}],"tool":{"_type":"Json"}}`, string(fs.JSON()))
	assert.Equal(t, "- name: messages\n  list: json\n- name: tool\n  dtype: json\n", fs.YAML(0))

	dir := t.TempDir()
	var pq bytes.Buffer
	tw, err := NewParquetWriter(&pq, fs)
	require.NoError(t, err)
	var st bytes.Buffer
	sw, err := NewStreamWriter(&st, fs)
	require.NoError(t, err)
	for _, r := range rows {
		require.NoError(t, tw.Append(r))
		require.NoError(t, sw.Append(r))
	}
	require.NoError(t, tw.Close())
	require.NoError(t, sw.Close())
	path := filepath.Join(dir, "x.parquet")
	require.NoError(t, os.WriteFile(path, pq.Bytes(), 0o644))

	tab, err := tabletest.ReadParquetFile(path)
	require.NoError(t, err)
	require.NoError(t, tabletest.CheckFeatures(tab, false))
	stored, err := tabletest.StoredArrowSchema(tab)
	require.NoError(t, err)
	want, err := tabletest.FeatureTypes(tab.Metadata[MetadataKey])
	require.NoError(t, err)
	require.NoError(t, tabletest.CheckFields(want, stored.Fields, true))
	assert.Equal(t, "arrow.json", stored.Fields[1].Extension)
	assert.Equal(t, "arrow.json", stored.Fields[0].Children[0].Extension)
	assert.Equal(t, `{"role":"assistant","content":"","tool_calls":[{"function":{"name":"exec","arguments":{"cmd":"ls"}}}]}`, tab.Rows[0]["messages"].([]any)[1])
	assert.Nil(t, tab.Rows[1]["tool"])

	ipcTab, err := tabletest.ReadStream(st.Bytes())
	require.NoError(t, err)
	require.NoError(t, tabletest.CheckFeatures(ipcTab, true))
	assert.Equal(t, `{"type":"function","function":{"name":"exec"}}`, ipcTab.Rows[0]["tool"])

	// Invalid JSON is refused, not written.
	tw2, err := NewParquetWriter(&bytes.Buffer{}, fs)
	require.NoError(t, err)
	require.ErrorContains(t, tw2.Append(Row{"tool": json.RawMessage(`{"a":`)}), "not valid JSON")
}
