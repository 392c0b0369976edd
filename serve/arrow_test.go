package serve_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
)

type stepKey struct {
	episode string
	index   int
}

type arrowStep struct {
	action, output string
	exitCode       int32
}

// arrowSteps reads the steps shards with arrow-go: the columns a client's
// actions and observations are compared with.
func arrowSteps(t *testing.T, dir string, shards []shard.ShardInfo) map[stepKey]arrowStep {
	t.Helper()
	out := map[stepKey]arrowStep{}
	for _, s := range shards {
		rdr, err := file.OpenParquetFile(filepath.Join(dir, filepath.FromSlash(s.File)), false)
		require.NoError(t, err)
		fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: 256}, memory.DefaultAllocator)
		require.NoError(t, err)
		rr, err := fr.GetRecordReader(context.Background(), nil, nil)
		require.NoError(t, err)
		for rr.Next() {
			rec := rr.RecordBatch()
			col := map[string]int{}
			for c := range int(rec.NumCols()) {
				col[rec.ColumnName(c)] = c
			}
			ids := rec.Column(col["episode_id"]).(*array.String)
			idx := rec.Column(col["step_index"]).(*array.Int32)
			act := rec.Column(col["action_json"]).(*array.String)
			outp := rec.Column(col["output"]).(*array.String)
			code := rec.Column(col["exit_code"]).(*array.Int32)
			for i := range int(rec.NumRows()) {
				k := stepKey{ids.Value(i), int(idx.Value(i))}
				_, dup := out[k]
				require.False(t, dup, "step %v recorded twice", k)
				out[k] = arrowStep{action: act.Value(i), output: outp.Value(i), exitCode: code.Value(i)}
			}
		}
		require.NoError(t, rr.Err())
		rr.Release()
		rdr.Close()
	}
	return out
}
