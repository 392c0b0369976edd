package shard

// A second, independent Parquet implementation (Apache arrow-go) checks the
// files in both directions: it reads every shard forkline writes, and it
// writes a steps shard that forkline's reader must read back.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/forkline/forkline/schemas"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// arrowField derives the Arrow field a row-type field should read as, from
// the Go type and tag alone: strings are utf8, []byte binary, slices
// non-null lists, and pointers and ",optional" fields nullable.
func arrowField(f reflect.StructField) arrow.Field {
	tag := f.Tag.Get("parquet")
	name, opts, _ := strings.Cut(tag, ",")
	nullable := strings.Contains(opts, "optional")
	t := f.Type
	if t.Kind() == reflect.Pointer {
		nullable, t = true, t.Elem()
	}
	var dt arrow.DataType
	switch {
	case t == reflect.TypeFor[[]byte]():
		dt = arrow.BinaryTypes.Binary
	case t.Kind() == reflect.Slice:
		dt = arrow.ListOfNonNullable(arrowScalarType(t.Elem()))
	default:
		dt = arrowScalarType(t)
	}
	return arrow.Field{Name: name, Type: dt, Nullable: nullable}
}

func arrowScalarType(t reflect.Type) arrow.DataType {
	switch t.Kind() {
	case reflect.String:
		return arrow.BinaryTypes.String
	case reflect.Int32:
		return arrow.PrimitiveTypes.Int32
	case reflect.Int64:
		return arrow.PrimitiveTypes.Int64
	case reflect.Float32:
		return arrow.PrimitiveTypes.Float32
	case reflect.Float64:
		return arrow.PrimitiveTypes.Float64
	case reflect.Bool:
		return arrow.FixedWidthTypes.Boolean
	}
	panic("no arrow type for " + t.String())
}

func arrowSchemaOf(t reflect.Type) *arrow.Schema {
	var fields []arrow.Field
	for f := range t.Fields() {
		fields = append(fields, arrowField(f))
	}
	return arrow.NewSchema(fields, nil)
}

// goValue is the value an Arrow cell should hold for a row-type field: nil
// for a nil pointer or a null optional (zero), the element type's values
// for lists (nil when empty).
func goValue(f reflect.StructField, v reflect.Value) any {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	} else if strings.Contains(f.Tag.Get("parquet"), ",optional") && v.IsZero() {
		return nil
	}
	if v.Kind() == reflect.Slice {
		if v.Len() == 0 {
			return nil
		}
	}
	return v.Interface()
}

// arrowValue reads one cell the same way.
func arrowValue(col arrow.Array, i int) any {
	if col.IsNull(i) {
		return nil
	}
	switch c := col.(type) {
	case *array.String:
		return c.Value(i)
	case *array.Binary:
		return bytes.Clone(c.Value(i))
	case *array.Int32:
		return c.Value(i)
	case *array.Int64:
		return c.Value(i)
	case *array.Float32:
		return c.Value(i)
	case *array.Float64:
		return c.Value(i)
	case *array.Boolean:
		return c.Value(i)
	case *array.List:
		start, end := c.ValueOffsets(i)
		if start == end {
			return nil
		}
		switch e := c.ListValues().(type) {
		case *array.Int32:
			return append([]int32(nil), e.Int32Values()[start:end]...)
		case *array.Float32:
			return append([]float32(nil), e.Float32Values()[start:end]...)
		}
	}
	panic(fmt.Sprintf("unexpected arrow array %T", col))
}

// readWithArrow reads a whole Parquet file with arrow-go into Go values, one
// map of column → value per row.
func readWithArrow(t *testing.T, path string) (*file.Reader, *arrow.Schema, []map[string]any) {
	t.Helper()
	rdr, err := file.OpenParquetFile(path, false)
	require.NoError(t, err)
	t.Cleanup(func() { rdr.Close() })
	fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: 64}, memory.DefaultAllocator)
	require.NoError(t, err)
	sc, err := fr.Schema()
	require.NoError(t, err)
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	require.NoError(t, err)
	defer rr.Release()
	var rows []map[string]any
	for rr.Next() {
		rec := rr.RecordBatch()
		for i := range int(rec.NumRows()) {
			row := map[string]any{}
			for c := range int(rec.NumCols()) {
				row[rec.ColumnName(c)] = arrowValue(rec.Column(c), i)
			}
			rows = append(rows, row)
		}
	}
	require.NoError(t, rr.Err())
	return rdr, sc, rows
}

// expectRows turns row structs into the maps readWithArrow returns.
func expectRows[T any](rows []T) []map[string]any {
	t := reflect.TypeFor[T]()
	var out []map[string]any
	for _, r := range rows {
		v := reflect.ValueOf(r)
		m := map[string]any{}
		for i, f := range slicesOfFields(t) {
			name, _, _ := strings.Cut(f.Tag.Get("parquet"), ",")
			m[name] = goValue(f, v.Field(i))
		}
		out = append(out, m)
	}
	return out
}

func slicesOfFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for f := range t.Fields() {
		out = append(out, f)
	}
	return out
}

func TestArrowReadsShards(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	batches := commitRange(t, w, 0, 200)
	require.NoError(t, w.Close(StatusComplete))
	m := w.Manifest()

	// What each table's shards must hold, in order, by generation.
	byGen := map[string]map[int][]map[string]any{}
	for _, table := range schemas.Tables {
		byGen[table] = map[int][]map[string]any{}
	}
	d, err := Open(dir)
	require.NoError(t, err)
	episodeGen := map[string]int{} // which generation holds which episode
	for _, s := range d.Shards(schemas.TableEpisodes) {
		for id, err := range readEpisodeIDs(d.src, s) {
			require.NoError(t, err)
			episodeGen[id] = s.Generation
		}
	}
	blobSeen := map[int]map[string]bool{}
	for _, b := range batches {
		gen := episodeGen[b.Episode.EpisodeID]
		byGen[schemas.TableEpisodes][gen] = append(byGen[schemas.TableEpisodes][gen], expectRows([]schemas.EpisodeRow{b.Episode})...)
		byGen[schemas.TableSteps][gen] = append(byGen[schemas.TableSteps][gen], expectRows(b.Steps)...)
		byGen[schemas.TableRewards][gen] = append(byGen[schemas.TableRewards][gen], expectRows(b.Rewards)...)
		if blobSeen[gen] == nil {
			blobSeen[gen] = map[string]bool{}
		}
		for _, bl := range b.Blobs {
			if !blobSeen[gen][bl.SHA256] {
				blobSeen[gen][bl.SHA256] = true
				byGen[schemas.TableBlobs][gen] = append(byGen[schemas.TableBlobs][gen], expectRows([]schemas.BlobRow{bl})...)
			}
		}
	}

	for _, s := range m.Shards {
		t.Run(s.File, func(t *testing.T) {
			rdr, sc, rows := readWithArrow(t, filepath.Join(dir, s.File))
			assert.Equal(t, s.Rows, rdr.NumRows())
			kv := rdr.MetaData().KeyValueMetadata()
			for key, want := range map[string]string{
				schemas.MetaSchemaVersion: strconv.Itoa(schemas.Version),
				schemas.MetaTable:         s.Table,
				schemas.MetaRunID:         testRunID,
			} {
				got := kv.FindValue(key)
				if assert.NotNil(t, got, key) {
					assert.Equal(t, want, *got, key)
				}
			}
			rt, err := schemas.RowType(s.Table)
			require.NoError(t, err)
			want := arrowSchemaOf(rt)
			require.Equal(t, want.NumFields(), sc.NumFields())
			for i, f := range want.Fields() {
				got := sc.Field(i)
				assert.Equal(t, f.Name, got.Name)
				assert.True(t, arrow.TypeEqual(f.Type, got.Type), "%s: want %s, got %s", f.Name, f.Type, got.Type)
				assert.Equal(t, f.Nullable, got.Nullable, "%s nullable", f.Name)
			}
			assert.Equal(t, byGen[s.Table][s.Generation], rows)
			assert.Equal(t, int(s.Rows), len(byGen[s.Table][s.Generation]))
		})
	}
}

// TestParquetGoReadsArrowShard writes a steps shard with arrow-go and reads
// it with this package's reader.
func TestParquetGoReadsArrowShard(t *testing.T) {
	var want []schemas.StepRow
	for i := range 12 {
		want = append(want, normSteps(makeBatch("r", i).Steps)...)
	}
	require.NotEmpty(t, want)

	sc := arrowSchemaOf(reflect.TypeFor[schemas.StepRow]())
	rb := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer rb.Release()
	fields := slicesOfFields(reflect.TypeFor[schemas.StepRow]())
	for _, row := range want {
		v := reflect.ValueOf(row)
		for i, f := range fields {
			appendArrow(rb.Field(i), goValue(f, v.Field(i)))
		}
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()

	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(sc, &buf,
		parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd)),
		pqarrow.DefaultWriterProps())
	require.NoError(t, err)
	require.NoError(t, fw.AppendKeyValueMetadata(schemas.MetaSchemaVersion, strconv.Itoa(schemas.Version)))
	require.NoError(t, fw.AppendKeyValueMetadata(schemas.MetaTable, schemas.TableSteps))
	require.NoError(t, fw.AppendKeyValueMetadata(schemas.MetaRunID, "r"))
	require.NoError(t, fw.Write(rec))
	require.NoError(t, fw.Close())

	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, schemas.TableSteps), 0o755))
	name := filepath.Join(schemas.TableSteps, shardName(0))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644))
	sum := sha256.Sum256(buf.Bytes())
	info := ShardInfo{File: filepath.ToSlash(name), Table: schemas.TableSteps, Rows: int64(len(want)),
		Bytes: int64(buf.Len()), SHA256: hex.EncodeToString(sum[:])}

	src := newSource(dir, "r")
	require.NoError(t, src.check(info))
	got := collect(t, readShard[schemas.StepRow](src, info, 5))
	assert.Equal(t, want, normSteps(got))
}

func appendArrow(b array.Builder, v any) {
	if v == nil {
		switch lb := b.(type) {
		case *array.ListBuilder:
			lb.Append(true) // an empty list: lists are not nullable
		default:
			b.AppendNull()
		}
		return
	}
	switch bb := b.(type) {
	case *array.StringBuilder:
		bb.Append(v.(string))
	case *array.BinaryBuilder:
		bb.Append(v.([]byte))
	case *array.Int32Builder:
		bb.Append(v.(int32))
	case *array.Int64Builder:
		bb.Append(v.(int64))
	case *array.Float32Builder:
		bb.Append(v.(float32))
	case *array.Float64Builder:
		bb.Append(v.(float64))
	case *array.BooleanBuilder:
		bb.Append(v.(bool))
	case *array.ListBuilder:
		bb.Append(true)
		switch vals := v.(type) {
		case []int32:
			bb.ValueBuilder().(*array.Int32Builder).AppendValues(vals, nil)
		case []float32:
			bb.ValueBuilder().(*array.Float32Builder).AppendValues(vals, nil)
		}
	default:
		panic(fmt.Sprintf("unexpected builder %T", b))
	}
}

// TestOptionalZeroStaysNull guards the workaround in tableFile.write: a
// step without raw output, screenshot or tree must read as null, not as an
// empty value, in another implementation. The patterns are the ones
// parquet-go v0.32.0 mis-writes in one Write call: a run of k nulls, k
// values, then nulls to the end of the batch.
func TestOptionalZeroStaysNull(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	require.NoError(t, err)
	present := [][]bool{
		{false, true, false, false},
		{false, false, true, true, false},
	}
	var want []bool
	for e, pattern := range present {
		id := fmt.Sprintf("e%d", e)
		b := EpisodeBatch{Episode: schemas.EpisodeRow{EpisodeID: id, RunID: testRunID, Steps: int32(len(pattern))}}
		for i, p := range pattern {
			st := schemas.StepRow{EpisodeID: id, StepIndex: int32(i)}
			if p {
				st.OutputRaw, st.Screenshot, st.ScreenHash, st.ScreenW, st.ScreenH, st.AXTree = []byte{0xff}, []byte("png"), "h", 2, 3, "{}"
			}
			b.Steps = append(b.Steps, st)
		}
		require.NoError(t, w.Commit(context.Background(), b))
		want = append(want, pattern...)
	}
	require.NoError(t, w.Close(StatusComplete))
	_, _, rows := readWithArrow(t, filepath.Join(dir, "steps", shardName(0)))
	require.Len(t, rows, len(want))
	for i, row := range rows {
		for _, col := range []string{"output_raw", "screenshot", "screenshot_sha256", "screenshot_width", "screenshot_height", "a11y_tree"} {
			if want[i] {
				assert.NotNil(t, row[col], "row %d %s", i, col)
			} else {
				assert.Nil(t, row[col], "row %d %s", i, col)
			}
		}
	}
}
