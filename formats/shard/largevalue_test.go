package shard

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/schemas"
)

// A large text value is stored once, compressed: a shard holding one 1 MiB
// value takes about what zstd makes of that value, not a multiple of it.
// Before the fix parquet-go wrote each page's minimum and maximum whole
// into its page header (twice each) and the column chunk's into the
// footer, uncompressed: a 1 MiB output made a steps shard of 3.4 MB, a
// 62.9 MB action one of 377 MB. Each column is checked in its own shard
// (rows read back equal), and the bound is the compressed value plus 5%
// and 32 KiB for the rest of the file.
func TestALargeValueIsStoredOnce(t *testing.T) {
	raw := make([]byte, 768<<10)
	rand.Read(raw)
	big := base64.StdEncoding.EncodeToString(raw) // 1 MiB of text, as an output or an action would be
	enc, err := zstd.NewWriter(nil)
	require.NoError(t, err)
	compressed := len(enc.EncodeAll([]byte(big), nil))
	ep := func(id string) schemas.EpisodeRow {
		return schemas.EpisodeRow{EpisodeID: id, RunID: testRunID, TaskID: "t", ExitReason: "done", Steps: 1}
	}
	step := func(id string) schemas.StepRow {
		return schemas.StepRow{EpisodeID: id, TaskID: "t", ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"x"}`}
	}
	for _, c := range []struct {
		column string
		table  string
		batch  func(id string) EpisodeBatch
	}{
		{"output", schemas.TableSteps, func(id string) EpisodeBatch {
			s := step(id)
			s.Output = big
			return EpisodeBatch{Episode: ep(id), Steps: []schemas.StepRow{s}}
		}},
		{"action_json", schemas.TableSteps, func(id string) EpisodeBatch {
			s := step(id)
			s.ActionJSON = fmt.Sprintf(`{"kind":"exec","cmd":%q}`, big)
			return EpisodeBatch{Episode: ep(id), Steps: []schemas.StepRow{s}}
		}},
		{"model_text", schemas.TableSteps, func(id string) EpisodeBatch {
			s := step(id)
			s.ModelText = &big
			return EpisodeBatch{Episode: ep(id), Steps: []schemas.StepRow{s}}
		}},
		{"answer", schemas.TableEpisodes, func(id string) EpisodeBatch {
			e := ep(id)
			e.Answer = big
			return EpisodeBatch{Episode: e, Steps: []schemas.StepRow{step(id)}}
		}},
		{"detail", schemas.TableRewards, func(id string) EpisodeBatch {
			return EpisodeBatch{Episode: ep(id), Steps: []schemas.StepRow{step(id)},
				Rewards: []schemas.RewardRow{{EpisodeID: id, Name: "verify", Detail: big}}}
		}},
		{"data", schemas.TableBlobs, func(id string) EpisodeBatch {
			return EpisodeBatch{Episode: ep(id), Steps: []schemas.StepRow{step(id)}, Blobs: []schemas.BlobRow{blobOf("text/plain", []byte(big))}}
		}},
	} {
		t.Run(c.column, func(t *testing.T) {
			dir := t.TempDir()
			w, err := Create(dir, testManifest(), DefaultConfig())
			require.NoError(t, err)
			b := c.batch("ep-1")
			require.NoError(t, w.Commit(t.Context(), b))
			require.NoError(t, w.Close(StatusComplete))
			ds, err := Open(dir)
			require.NoError(t, err)
			info := ds.Shards(c.table)[0]
			st, err := os.Stat(filepath.Join(dir, info.File))
			require.NoError(t, err)
			bound := compressed + compressed/20 + 32<<10
			t.Logf("%s: a %d-byte value (%d compressed) in a %d-byte shard", c.column, len(big), compressed, st.Size())
			require.LessOrEqual(t, int(st.Size()), bound, "the value is stored once")
			got := 0
			for e, err := range ds.Episodes() {
				require.NoError(t, err)
				got++
				if c.column == "answer" {
					require.Equal(t, big, e.Answer)
				}
			}
			require.Equal(t, 1, got)
			for s, err := range ds.Steps() {
				require.NoError(t, err)
				switch c.column {
				case "output":
					require.Equal(t, big, s.Output)
				case "action_json":
					require.True(t, bytes.Contains([]byte(s.ActionJSON), []byte(big[:1000])))
				case "model_text":
					require.Equal(t, big, *s.ModelText)
				}
			}
		})
	}
}
