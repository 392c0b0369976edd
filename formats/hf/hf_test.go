package hf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/formats/model/tabletest"
	"github.com/forkline/forkline/schemas"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func ptr[T any](v T) *T { return &v }

var png1 = []byte("\x89PNG\r\n\x1a\nfirst")
var png2 = []byte("\x89PNG\r\n\x1a\nsecond")

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// episode returns an episode with a token record, a screenshot kept in the
// row and one stored by hash, and rewards (one null).
func episode(id, split string) *model.Episode {
	return &model.Episode{
		Row: schemas.EpisodeRow{EpisodeID: id, RunID: "run-1", TaskID: "t1", ExitReason: "done", Answer: "42", Steps: 3,
			PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{10, 11, 20, 21, 30}, ResponseMask: []int32{1, 1, 0, 0, 1},
			ResponseLogprobs: []float32{-0.5, -0.25, 0, 0, -1}, TokenTurns: 2, DurationMS: 12.5},
		Steps: []schemas.StepRow{
			{EpisodeID: id, StepIndex: 0, TaskID: "t1", ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"echo <hi>"}`, Output: "<hi>\n",
				ModelText: ptr("run it"), PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{10, 11}, ResponseLogprobs: []float32{-0.5, -0.25}},
			{EpisodeID: id, StepIndex: 1, TaskID: "t1", ActionKind: "click", ActionJSON: `{"kind":"click","x":1,"y":2}`, ExitCode: -1,
				Screenshot: png1, ScreenHash: sha(png1), ScreenW: 8, ScreenH: 6, AXTree: `{"role":"button"}`},
			{EpisodeID: id, StepIndex: 2, TaskID: "t1", ActionKind: "done", ActionJSON: `{"kind":"done","answer":"42"}`, ExitCode: -1,
				ScreenHash: sha(png2), ScreenW: 8, ScreenH: 6},
		},
		Rewards: []schemas.RewardRow{
			{EpisodeID: id, Name: "verify", Value: ptr(1.0)},
			{EpisodeID: id, Name: "lint", Value: nil},
			{EpisodeID: id, StepIndex: ptr(int32(1)), Name: "verify", Value: ptr(0.5)},
		},
		Instruction: "Answer with 42.",
		RewardName:  "verify",
		Split:       split,
		Blob: func(h string) ([]byte, error) {
			if h == sha(png2) {
				return png2, nil
			}
			return nil, os.ErrNotExist
		},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create %s", path)
	assert.Equal(t, string(want), string(got), "%s differs; rerun with -update if the change is intended", path)
}

func TestFeaturesGolden(t *testing.T) {
	for _, rows := range []RowsPer{RowsEpisode, RowsStep} {
		fs := FeaturesFor(rows)
		var pretty bytes.Buffer
		require.NoError(t, json.Indent(&pretty, fs.JSON(), "", "  "))
		out := "# Arrow schema\n" + fs.ArrowSchema().String() + "\n\n# features JSON (huggingface metadata: {\"info\":{\"features\": ...}})\n" +
			pretty.String() + "\n\n# dataset card YAML\n" + fs.YAML(0)
		golden(t, "features-"+string(rows)+".golden", []byte(out))
	}
}

// The features JSON, read by rules written independently in tabletest, gives
// exactly the Arrow schema the writer uses.
func TestFeatureJSONMatchesArrowSchema(t *testing.T) {
	for _, rows := range []RowsPer{RowsEpisode, RowsStep} {
		fs := FeaturesFor(rows)
		want, err := tabletest.FeatureTypes(fs.MetadataJSON())
		require.NoError(t, err)
		stored, err := tabletest.DecodeSchemaMessage(serializeSchema(fs))
		require.NoError(t, err)
		require.NoError(t, tabletest.CheckFields(want, stored.Fields, true), string(rows))
	}
}

func TestParquetRoundTripWithParquetGo(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.parquet")
	f, err := os.Create(path)
	require.NoError(t, err)
	tw, err := model.NewParquetWriter(f, EpisodeFeatures)
	require.NoError(t, err)
	tw.BatchRows = 1 // one row group per row
	for _, id := range []string{"a", "b"} {
		r, err := EpisodeRow(episode(id, "train"), ToolValues(episode(id, "train")), model.Options{})
		require.NoError(t, err)
		require.NoError(t, tw.Append(r))
	}
	ep := episode("c", "train")
	ep.Row.ResponseLogprobs = nil // a record without logprobs: null, not []
	r, err := EpisodeRow(ep, ToolValues(ep), model.Options{})
	require.NoError(t, err)
	require.NoError(t, tw.Append(r))
	require.NoError(t, tw.Close())
	require.NoError(t, f.Close())

	tab, err := tabletest.ReadParquetFile(path)
	require.NoError(t, err)
	assert.Equal(t, 3, tab.Batches)
	require.NoError(t, tabletest.CheckFeatures(tab, false), "features vs the Parquet schema pyarrow infers")
	stored, err := tabletest.StoredArrowSchema(tab)
	require.NoError(t, err)
	require.NoError(t, tabletest.CheckFields(mustFeatureTypes(t, tab), stored.Fields, true), "features vs ARROW:schema")

	require.Len(t, tab.Rows, 3)
	row := tab.Rows[0]
	assert.Equal(t, "a", row["episode_id"])
	assert.Equal(t, []any{int64(1), int64(2), int64(3)}, row["prompt_ids"])
	assert.Equal(t, []any{int64(1), int64(1), int64(0), int64(0), int64(1)}, row["response_mask"])
	assert.Equal(t, []any{-0.5, -0.25, 0.0, 0.0, -1.0}, row["response_logprobs"])
	assert.Equal(t, 1.0, row["reward"])
	assert.Nil(t, tab.Rows[2]["response_logprobs"])
	shots := row["screenshots"].([]any)
	require.Len(t, shots, 3, "finding 8: one entry per step")
	assert.Nil(t, shots[0], "step 0 took no screenshot")
	assert.Equal(t, map[string]any{"bytes": png1, "path": nil}, shots[1], "from the row")
	assert.Equal(t, map[string]any{"bytes": png2, "path": nil}, shots[2], "from the blob store")
	rewards := row["rewards"].([]any)
	assert.Equal(t, map[string]any{"name": "lint", "step_index": nil, "value": nil}, rewards[1])
	msgs := row["messages"].([]any)
	assert.Equal(t, `{"role":"user","content":"Answer with 42."}`, msgs[0], "finding 3: the user message has no other key")
	assert.Equal(t, `{"role":"assistant","content":"run it","tool_calls":[{"id":"call_0","type":"function","function":{"name":"exec","arguments":{"cmd":"echo <hi>"}}}]}`, msgs[1],
		"finding 4: arguments as an object, encoded once")
	assert.Equal(t, `{"role":"assistant","content":"","tool_calls":[{"id":"call_2","type":"function","function":{"name":"done","arguments":{"answer":"42"}}}]}`, msgs[len(msgs)-1],
		"finding 1: the done call")
	tools := row["tools"].([]any)
	require.Len(t, tools, 13)
	assert.True(t, strings.HasPrefix(tools[0].(string), `{"type":"function","function":{"name":"click","description":`), "finding 8: the key order the policy sent")
}

func mustFeatureTypes(t *testing.T, tab *tabletest.Table) []tabletest.Type {
	want, err := tabletest.FeatureTypes(tab.Metadata[model.MetadataKey])
	require.NoError(t, err)
	return want
}

func TestStreamRoundTripWithHandWrittenReader(t *testing.T) {
	var buf bytes.Buffer
	tw, err := model.NewStreamWriter(&buf, StepFeatures)
	require.NoError(t, err)
	tw.BatchRows = 2
	require.NoError(t, StepRows(episode("a", "train"), tw.Append))
	require.NoError(t, tw.Close())
	tab, err := tabletest.ReadStream(buf.Bytes())
	require.NoError(t, err)
	assert.Equal(t, 2, tab.Batches)
	require.NoError(t, tabletest.CheckFeatures(tab, true))
	require.Len(t, tab.Rows, 3)
	assert.Equal(t, map[string]any{"bytes": png1, "path": nil}, tab.Rows[1]["screenshot"])
	assert.Nil(t, tab.Rows[0]["screenshot"])
	assert.Equal(t, 0.5, tab.Rows[1]["step_reward"])
	assert.Equal(t, 1.0, tab.Rows[2]["episode_reward"])
	assert.Equal(t, `{"kind":"click","x":1,"y":2}`, tab.Rows[1]["action_json"])
	assert.Equal(t, int64(-1), tab.Rows[1]["exit_code"])
	assert.Nil(t, tab.Rows[0]["a11y_tree"])
}

func listFiles(t *testing.T, dir string) []string {
	var out []string
	require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		require.NoError(t, err)
		if !info.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	}))
	sort.Strings(out)
	return out
}

func TestWriterLayoutAndCard(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir, []string{"train", "test"}, Options{Provenance: []string{"run run-1: 3 episodes"}, MaxShardBytes: 1})
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		require.NoError(t, w.Write(episode(id, "train")))
	}
	require.NoError(t, w.Close())
	assert.Equal(t, []string{"README.md", "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"},
		listFiles(t, dir), "MaxShardBytes 1: one episode per shard; finding 5: the empty split test has no file")
	card, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	golden(t, "card-episode.golden.md", card)
	assert.Contains(t, string(card), "  - name: train\n    num_examples: 2\n")
	assert.Contains(t, string(card), "not written (`datasets` cannot load an empty split): test")

	shard, err := tabletest.ReadParquetFile(filepath.Join(dir, "data/train-00000-of-00002.parquet"))
	require.NoError(t, err)

	// The card, read by datasets' YAML rules, describes the files exactly.
	c, err := tabletest.ReadCard(card)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"train": 2}, c.Splits)
	assert.Equal(t, map[string]string{"train": "data/train-*"}, c.Files)
	stored, err := tabletest.StoredArrowSchema(shard)
	require.NoError(t, err)
	require.NoError(t, tabletest.CheckFields(c.Features, stored.Fields, true), "card features vs the files' Arrow types")
}

// The card takes its license, task categories and language from the flags,
// and refuses what is not a Hub identifier before anything is written.
func TestCardMetadata(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir, []string{"train"}, Options{License: "apache-2.0", TaskCategories: []string{"text-generation", "reinforcement-learning"}, Languages: []string{"en", "pt-BR"}})
	require.NoError(t, err)
	require.NoError(t, w.Write(episode("a", "train")))
	require.NoError(t, w.Close())
	card, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(card), "---\nlicense: apache-2.0\ntask_categories:\n- text-generation\n- reinforcement-learning\nlanguage:\n- en\n- pt-BR\nsize_categories:\n- n<1K\nconfigs:\n"), "%s", card)
	_, err = tabletest.ReadCard(card)
	require.NoError(t, err)
	for _, bad := range []Options{{License: "MIT License"}, {TaskCategories: []string{"a\nb"}}, {Languages: []string{"English"}}} {
		_, err := NewWriter(t.TempDir(), []string{"train"}, bad)
		require.Error(t, err)
	}
}

func TestDiskWriterLayout(t *testing.T) {
	dir := t.TempDir()
	w, err := NewDiskWriter(dir, []string{"train", "test"}, Options{Rows: RowsStep})
	require.NoError(t, err)
	require.NoError(t, w.Write(episode("a", "test")))
	require.NoError(t, w.Close())
	assert.Equal(t, []string{"dataset_dict.json",
		"test/data-00000-of-00001.arrow", "test/dataset_info.json", "test/state.json"}, listFiles(t, dir))

	dict, err := os.ReadFile(filepath.Join(dir, "dataset_dict.json"))
	require.NoError(t, err)
	assert.JSONEq(t, `{"splits":["test"]}`, string(dict))

	state, err := os.ReadFile(filepath.Join(dir, "test", "state.json"))
	require.NoError(t, err)
	var st map[string]any
	require.NoError(t, json.Unmarshal(state, &st))
	keys := []string{}
	for k := range st {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	assert.Equal(t, []string{"_data_files", "_fingerprint", "_format_columns", "_format_kwargs", "_format_type", "_output_all_columns", "_split"}, keys)
	assert.Equal(t, "test", st["_split"])
	assert.Equal(t, []any{map[string]any{"filename": "data-00000-of-00001.arrow"}}, st["_data_files"])
	assert.Len(t, st["_fingerprint"], 16)
	assert.True(t, strings.HasPrefix(string(state), "{\n  \"_data_files\": [\n    {\n      \"filename\""), "indent 2, sorted keys:\n%s", state)

	tab, err := tabletest.ReadStreamFile(filepath.Join(dir, "test", "data-00000-of-00001.arrow"))
	require.NoError(t, err)
	require.Len(t, tab.Rows, 3)
	require.NoError(t, tabletest.CheckFeatures(tab, true))
	info, err := os.ReadFile(filepath.Join(dir, "test", "dataset_info.json"))
	require.NoError(t, err)
	var di struct {
		Features json.RawMessage `json:"features"`
	}
	require.NoError(t, json.Unmarshal(info, &di))
	infoTypes, err := tabletest.FeaturesJSONTypes(di.Features)
	require.NoError(t, err)
	require.NoError(t, tabletest.CheckFields(infoTypes, tab.Fields, true), "dataset_info.json features must match the Arrow types")
	golden(t, "disk-dataset_info-step.golden.json", info)
}

// Same episodes, same bytes.
func TestDeterministic(t *testing.T) {
	sums := map[string]bool{}
	for range 2 {
		dir := t.TempDir()
		w, err := NewWriter(dir, []string{"train"}, Options{})
		require.NoError(t, err)
		require.NoError(t, w.Write(episode("a", "train")))
		require.NoError(t, w.Close())
		b, err := os.ReadFile(filepath.Join(dir, "data/train-00000-of-00001.parquet"))
		require.NoError(t, err)
		sums[sha(b)] = true
	}
	assert.Len(t, sums, 1)
}

// sft-tokens rows are the server's ids, never a re-tokenization: the
// episode's prompt then its record with the record's mask, or per turn the
// turn's prompt (mask 0) and response (mask 1); an episode without ids, or
// whose record drifted, is refused (its turns are not).
func TestTokenRows(t *testing.T) {
	ep := episode("a", "train")
	var rows []model.Row
	require.NoError(t, TokenRows(ep, false, func(r model.Row) error { rows = append(rows, r); return nil }))
	require.Len(t, rows, 1)
	assert.Equal(t, []int32{1, 2, 3, 10, 11, 20, 21, 30}, rows[0]["input_ids"])
	assert.Equal(t, []int8{0, 0, 0, 1, 1, 0, 0, 1}, rows[0]["assistant_masks"])

	rows = nil
	require.NoError(t, TokenRows(ep, true, func(r model.Row) error { rows = append(rows, r); return nil }))
	require.Len(t, rows, 1, "one step carries ids")
	assert.Equal(t, []int32{1, 2, 3, 10, 11}, rows[0]["input_ids"])
	assert.Equal(t, []int8{0, 0, 0, 1, 1}, rows[0]["assistant_masks"])
	assert.Equal(t, ptr(int32(0)), rows[0]["turn"])

	ep.Row.TokenDrift = true
	var ref *model.Refusal
	require.ErrorAs(t, TokenRows(ep, false, func(model.Row) error { return nil }), &ref)
	assert.Equal(t, RefusedDrift, ref.Reason)
	require.NoError(t, TokenRows(ep, true, func(model.Row) error { return nil }), "turn rows of a drifted episode")
	ep.Steps[0].PromptIDs = nil
	require.ErrorAs(t, TokenRows(ep, true, func(model.Row) error { return nil }), &ref)
	assert.Equal(t, RefusedNoTokens, ref.Reason)
}

func TestSizeCategory(t *testing.T) {
	for n, want := range map[int64]string{0: "n<1K", 999: "n<1K", 1000: "1K<n<10K", 99_999: "10K<n<100K",
		100_000: "100K<n<1M", 5_000_000: "1M<n<10M", 2_000_000_000_000: "n>1T"} {
		assert.Equal(t, want, SizeCategory(n), "%d", n)
	}
}
