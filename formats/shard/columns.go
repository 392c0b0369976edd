package shard

import "iter"

// Project streams the rows of table into T, a projection of the table's row
// type: a struct naming some of its columns by their parquet tags. Only
// those columns are decoded, so a pass over a few small columns of the steps
// table (its token provenance, say) does not decode every turn's token ids.
// Rows come in the table's order (that of Steps, Episodes, ...), each shard
// checked as every reader checks it; the iteration stops after yielding an
// error (ErrCorrupt for a shard that cannot be decoded).
func Project[T any](d *Dataset, table string) iter.Seq2[T, error] {
	return readShards[T](d.src, d.Shards(table), readBatchKeys)
}
