package shard

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/schemas"
)

// craftListCounts rewrites the footer of the Parquet file at path so that
// every chunk of the list column named column claims n values, and returns
// how many chunks it changed. The pages are left as they are: the file is
// what a publisher who edits footers would hand out, well formed but lying
// about its sizes.
func craftListCounts(t *testing.T, path, column string, n int64) int {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	size := len(data)
	require.Equal(t, "PAR1", string(data[size-4:]))
	footerLen := int(binary.LittleEndian.Uint32(data[size-8 : size-4]))
	body := data[:size-8-footerLen]
	var md format.FileMetaData
	require.NoError(t, thrift.Unmarshal(new(thrift.CompactProtocol), data[len(body):size-8], &md))
	changed := 0
	for i := range md.RowGroups {
		for j := range md.RowGroups[i].Columns {
			c := &md.RowGroups[i].Columns[j].MetaData
			if len(c.PathInSchema) > 0 && c.PathInSchema[0] == column {
				c.NumValues = n
				changed++
			}
		}
	}
	footer, err := thrift.Marshal(new(thrift.CompactProtocol), &md)
	require.NoError(t, err)
	out := append(append([]byte{}, body...), footer...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(footer)))
	out = append(out, "PAR1"...)
	require.NoError(t, os.WriteFile(path, out, 0o644))
	return changed
}

// resealShard writes dir's manifest again with the shard file's new size and
// sha256, as the publisher of a crafted dataset would: the dataset's own
// integrity checks then pass, and only the reader's bounds stand between a
// footer's word and the reader's memory.
func resealShard(t *testing.T, dir string, m Manifest, file string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(file)))
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	sealed := m.Clone()
	found := false
	for i := range sealed.Shards {
		if sealed.Shards[i].File == file {
			sealed.Shards[i].Bytes, sealed.Shards[i].SHA256 = int64(len(data)), hex.EncodeToString(sum[:])
			found = true
		}
	}
	require.True(t, found, "no shard %s in the manifest", file)
	b, err := json.MarshalIndent(sealed, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o644))
}

// A dataset is untrusted input once published. A steps shard whose footer
// says each row group's prompt_ids chunk holds 256 Mi values (1 GiB as
// int32s) while its pages hold a few hundred is read, by the streaming
// reader (Steps) and by the per-episode one the exports use (EachEpisode),
// with room made for at most maxListPrealloc values a chunk, not the
// footer's count, and gives the rows the pages hold — the ones the
// undamaged dataset gives.
func TestCraftedListCountDoesNotSizeTheRead(t *testing.T) {
	dir, m := corruptionFixture(t)
	readers := map[string]func(ds *Dataset, keep func(schemas.StepRow)){
		"Steps": func(ds *Dataset, keep func(schemas.StepRow)) {
			for s, err := range ds.Steps() {
				require.NoError(t, err)
				keep(s)
			}
		},
		"EachEpisode": func(ds *Dataset, keep func(schemas.StepRow)) {
			require.NoError(t, ds.EachEpisode(func(_ schemas.EpisodeRow, steps []schemas.StepRow, _ []schemas.RewardRow) error {
				for _, s := range steps {
					keep(s)
				}
				return nil
			}))
		},
	}
	// read returns the prompt ids each reader gives, by step, and the bytes
	// it allocated.
	read := func(name string) (map[string][]int32, uint64) {
		ds, err := Open(dir)
		require.NoError(t, err)
		got := map[string][]int32{}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		readers[name](ds, func(s schemas.StepRow) {
			if len(s.PromptIDs) > 0 {
				got[fmt.Sprintf("%s/%d", s.EpisodeID, s.StepIndex)] = s.PromptIDs
			}
		})
		runtime.ReadMemStats(&after)
		return got, after.TotalAlloc - before.TotalAlloc
	}
	want, plain := map[string]map[string][]int32{}, map[string]uint64{}
	for name := range readers {
		want[name], plain[name] = read(name)
		require.NotEmpty(t, want[name], "the fixture has prompt ids to read")
	}

	steps := (&Dataset{m: m}).Shards(schemas.TableSteps)
	const claimed = 256 << 20
	require.Greater(t, claimed, maxListPrealloc, "the claim is past the bound, or the test shows nothing")
	chunks := craftListCounts(t, filepath.Join(dir, filepath.FromSlash(steps[0].File)), "prompt_ids", claimed)
	require.Greater(t, chunks, 1, "every row group's chunk claims the count")
	resealShard(t, dir, m, steps[0].File)

	for name := range readers {
		got, crafted := read(name)
		require.Equal(t, want[name], got, "%s: the rows are the pages' rows, whatever the footer claims", name)
		// Each row group's chunk may make room for maxListPrealloc int32s
		// (16 MiB, with a MiB for the run-to-run swing of the rest); the
		// footer's count would be 1 GiB a chunk. This bounds the bytes
		// allocated in all, not the peak held at once (a chunk's room is
		// garbage once its rows are set, but the test does not measure
		// when it is collected).
		require.Less(t, crafted, plain[name]+uint64(chunks)*(maxListPrealloc*4+1<<20),
			"%s allocated %d MiB reading %d crafted chunks (%d MiB for the honest file)", name, crafted>>20, chunks, plain[name]>>20)
		require.Less(t, crafted, uint64(claimed)*4, "%s: less than one chunk's claimed count", name)
	}
}
