package model

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A batch is encoded on its own goroutine while the next is built; the
// bytes must not depend on that: the same rows give the same file whatever
// the scheduling (one core or several, a busy machine), the row groups hold
// the rows in the order they were appended, and Size, which writers roll
// their files by, follows the appends and never the encoder's progress.
func TestPipelinedBatchesAreDeterministic(t *testing.T) {
	fs := Features{
		{Name: "n", Type: Value("int64")},
		{Name: "text", Type: Value("string")},
		{Name: "ids", Type: List{Item: Value("int32")}},
		{Name: "msg", Type: List{Item: JSON{}}},
	}
	const rows, batch = 1000, 64
	write := func(stream bool) ([]byte, []int64) {
		var buf bytes.Buffer
		var tw *TableWriter
		var err error
		if stream {
			tw, err = NewStreamWriter(&buf, fs)
		} else {
			tw, err = NewParquetWriter(&buf, fs)
		}
		require.NoError(t, err)
		tw.BatchRows = batch
		var sizes []int64
		for i := range rows {
			ids := make([]int32, i%17)
			for j := range ids {
				ids[j] = int32(i * j)
			}
			require.NoError(t, tw.Append(Row{"n": int64(i), "text": strings.Repeat("x", i%50) + fmt.Sprint(i), "ids": ids,
				"msg": []any{fmt.Sprintf(`{"role":"user","content":"%d"}`, i)}}))
			sizes = append(sizes, tw.Size())
		}
		require.NoError(t, tw.Close())
		return buf.Bytes(), sizes
	}
	for _, stream := range []bool{false, true} {
		want, wantSizes := write(stream)
		prev := runtime.GOMAXPROCS(0)
		for _, procs := range []int{1, 2, 4} {
			runtime.GOMAXPROCS(procs)
			// A busy goroutine competes with the encoder.
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				for ctx.Err() == nil {
					runtime.Gosched()
				}
			}()
			got, sizes := write(stream)
			cancel()
			assert.Equal(t, want, got, "stream %v, GOMAXPROCS %d: other bytes", stream, procs)
			assert.Equal(t, wantSizes, sizes, "stream %v, GOMAXPROCS %d: Size differs", stream, procs)
		}
		runtime.GOMAXPROCS(prev)

		// The rows read back in append order, one batch per row group.
		var ns []int64
		if stream {
			r, err := ipc.NewReader(bytes.NewReader(want))
			require.NoError(t, err)
			batches := 0
			for r.Next() {
				batches++
				ns = append(ns, r.RecordBatch().Column(0).(*array.Int64).Int64Values()...)
			}
			require.NoError(t, r.Err())
			r.Release()
			assert.Equal(t, (rows+batch-1)/batch, batches)
		} else {
			pf, err := file.NewParquetReader(bytes.NewReader(want))
			require.NoError(t, err)
			assert.Equal(t, (rows+batch-1)/batch, pf.NumRowGroups())
			fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
			require.NoError(t, err)
			tbl, err := fr.ReadTable(context.Background())
			require.NoError(t, err)
			for _, c := range tbl.Column(0).Data().Chunks() {
				ns = append(ns, c.(*array.Int64).Int64Values()...)
			}
			tbl.Release()
		}
		require.Len(t, ns, rows)
		for i, n := range ns {
			require.Equal(t, int64(i), n, "row %d", i)
		}
	}
}
