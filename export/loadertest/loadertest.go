// Package loadertest re-implements, for tests, what the consumers of
// forkline's exports do to them before a trainer sees a row, from the
// consumers' documented behaviour and source (the file and function each
// step follows are named where it is done):
//
//   - Hugging Face datasets: load_dataset on a directory with a dataset card
//     (the card's YAML front matter, its configs' data_files patterns
//     resolved to files, split names, the recorded split sizes verified, an
//     empty split refused as arrow_reader does, features taken from the card
//     or the files and checked against the files' Arrow types, Json values
//     decoded), load_dataset("parquet", data_files=FILE) as verl's
//     RLHFDataset calls it, load_dataset("json") on JSON Lines (datasets ≥
//     4.7, where rows of mixed shapes become Json), and load_from_disk;
//   - verl: RLHFDataset's column handling of a verl-agent row, and
//     MultiTurnSFTDataset's message rebuilding (_build_messages) of a
//     verl-sft row through the dataset class docs/verl_sft_dataset.py, and
//     the agent loop docs/verl_agent_loop.py on a verl-agent row, both run
//     by Debian's Python 3 against stand-ins of the verl modules they import;
//   - TRL: the conversation and tools a chat template receives from an SFT
//     row (SFTConversation), and the labels SFTTrainer builds from a
//     pre-tokenized row's masks (TRLLabels). DPOTrainer's rendering of a
//     preference row is followed where it is checked, in export's oracle
//     test, because it needs the templates of internal/oracle.
//
// Messages and tools come out as JSON with their key order kept (a chat
// template's tojson writes keys in the order it receives them), ready for
// internal/oracle's renderers. Files are read with formats/model/tabletest's
// readers, independent of the writer. It is a test helper package.
package loadertest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/png" // datasets' Image feature decodes PNG (through PIL)
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/forkline/forkline/formats/model/tabletest"
)

// Row is one loaded row: column name → value in tabletest's normalized
// forms, except that Json values are json.RawMessage (the stored text).
type Row map[string]any

// Conversation is what a chat template is given for one row.
type Conversation struct {
	Messages json.RawMessage // a JSON array of message objects
	Tools    json.RawMessage // a JSON array of tool objects, or nil (None)
}

// splitName is datasets' rule for split names (splits.py _split_re).
var splitName = regexp.MustCompile(`^\w+(\.\w+)*$`)

// LoadHF loads an hf (or sft-tokens) export directory as load_dataset(dir)
// does and returns its rows per split.
func LoadHF(dir string) (map[string][]Row, error) {
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		return nil, fmt.Errorf("loadertest: %w", err)
	}
	card, err := tabletest.ReadCard(readme)
	if err != nil {
		return nil, err
	}
	if len(card.Files) == 0 {
		return nil, errors.New("loadertest: the card's configs name no data_files")
	}
	// The data files are resolved first (load.py builds the DataFilesDict
	// before any split is read): a pattern without a match is a
	// FileNotFoundError.
	resolved := map[string][]string{}
	for split, pattern := range card.Files {
		if !splitName.MatchString(split) {
			return nil, fmt.Errorf("loadertest: split name %q is not valid (datasets: ^\\w+(\\.\\w+)*$)", split)
		}
		files, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(pattern)))
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("loadertest: FileNotFoundError: Unable to find '%s' for split %s", pattern, split)
		}
		slices.Sort(files)
		resolved[split] = files
	}
	// Splits recorded in the card and the configs' splits must be the same
	// set (info_utils.verify_splits: ExpectedMoreSplitsError /
	// UnexpectedSplitsError).
	for s := range card.Splits {
		if _, ok := card.Files[s]; !ok {
			return nil, fmt.Errorf("loadertest: ExpectedMoreSplitsError: the card records split %s, the configs have no files for it", s)
		}
	}
	out := map[string][]Row{}
	for split, files := range resolved {
		want, ok := card.Splits[split]
		if !ok && len(card.Splits) > 0 {
			return nil, fmt.Errorf("loadertest: UnexpectedSplitsError: split %s has files but no recorded size", split)
		}
		var rows []Row
		for _, f := range files {
			rs, err := readParquet(f, card.Features)
			if err != nil {
				return nil, err
			}
			rows = append(rows, rs...)
		}
		if len(rows) == 0 {
			// arrow_reader.make_file_instructions skips files without rows,
			// then BaseReader.read raises.
			return nil, fmt.Errorf("loadertest: datasets raises ValueError: instruction %q corresponds to no data", split)
		}
		if ok && int64(len(rows)) != want {
			return nil, fmt.Errorf("loadertest: NonMatchingSplitsSizesError: split %s records %d examples, its files hold %d", split, want, len(rows))
		}
		out[split] = rows
	}
	return out, nil
}

// LoadParquetFile loads one Parquet file as load_dataset("parquet",
// data_files=path)["train"] does (verl's RLHFDataset, rl_dataset.py): the
// features from its huggingface metadata, checked against its Arrow types;
// a file without rows is refused as datasets refuses an empty split.
func LoadParquetFile(path string) ([]Row, error) {
	rows, err := readParquet(path, nil)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, errors.New(`loadertest: datasets raises ValueError: instruction "train" corresponds to no data`)
	}
	return rows, nil
}

// readParquet reads a Parquet file and applies datasets' features rule:
// the features (the card's when given, else the file's metadata) must equal
// the file's Arrow fields (the ARROW:schema pyarrow restores), field by
// field, or datasets would infer other types.
func readParquet(path string, cardFeatures []tabletest.Type) ([]Row, error) {
	tab, err := tabletest.ReadParquetFile(path)
	if err != nil {
		return nil, err
	}
	stored, err := tabletest.StoredArrowSchema(tab)
	if err != nil {
		return nil, fmt.Errorf("loadertest: %s: %w", path, err)
	}
	want := cardFeatures
	if want == nil {
		if want, err = tabletest.FeatureTypes(tab.Metadata["huggingface"]); err != nil {
			return nil, fmt.Errorf("loadertest: %s: %w", path, err)
		}
	}
	if err := tabletest.CheckFields(want, stored.Fields, true); err != nil {
		return nil, fmt.Errorf("loadertest: %s: the features do not match the file's Arrow types: %w", path, err)
	}
	return decodeRows(tab, want)
}

// decodeRows turns Json values into json.RawMessage, as Json.decode_example
// decodes them (json.loads keeps key order; so does RawMessage).
func decodeRows(tab *tabletest.Table, fields []tabletest.Type) ([]Row, error) {
	out := make([]Row, len(tab.Rows))
	for i, r := range tab.Rows {
		row := Row{}
		for _, f := range fields {
			v, err := decodeJSON(r[f.Name], f)
			if err != nil {
				return nil, fmt.Errorf("loadertest: row %d column %s: %w", i, f.Name, err)
			}
			row[f.Name] = v
		}
		out[i] = row
	}
	return out, nil
}

func decodeJSON(v any, t tabletest.Type) (any, error) {
	if v == nil {
		return nil, nil
	}
	if t.Extension == "arrow.json" {
		s, ok := v.(string)
		if !ok || !json.Valid([]byte(s)) {
			return nil, fmt.Errorf("a Json value that is not JSON text: %v", v)
		}
		return json.RawMessage(s), nil
	}
	if t.Kind == "list" {
		items, _ := v.([]any)
		out := make([]any, len(items))
		for i, it := range items {
			d, err := decodeJSON(it, t.Children[0])
			if err != nil {
				return nil, err
			}
			out[i] = d
		}
		return out, nil
	}
	return v, nil
}

// LoadFromDisk loads an hf-disk export as datasets' load_from_disk does:
// dataset_dict.json's splits, each split's state.json data files (Arrow IPC
// streams) and dataset_info.json features, which must equal the stream's
// Arrow types.
func LoadFromDisk(dir string) (map[string][]Row, error) {
	var dict struct {
		Splits []string `json:"splits"`
	}
	if err := readJSON(filepath.Join(dir, "dataset_dict.json"), &dict); err != nil {
		return nil, err
	}
	out := map[string][]Row{}
	for _, split := range dict.Splits {
		var state struct {
			DataFiles []struct {
				Filename string `json:"filename"`
			} `json:"_data_files"`
		}
		if err := readJSON(filepath.Join(dir, split, "state.json"), &state); err != nil {
			return nil, err
		}
		var info struct {
			Features json.RawMessage `json:"features"`
		}
		if err := readJSON(filepath.Join(dir, split, "dataset_info.json"), &info); err != nil {
			return nil, err
		}
		want, err := tabletest.FeaturesJSONTypes(info.Features)
		if err != nil {
			return nil, err
		}
		var rows []Row
		for _, df := range state.DataFiles {
			tab, err := tabletest.ReadStreamFile(filepath.Join(dir, split, df.Filename))
			if err != nil {
				return nil, err
			}
			if err := tabletest.CheckFields(want, tab.Fields, true); err != nil {
				return nil, fmt.Errorf("loadertest: %s/%s: dataset_info.json features vs the stream: %w", split, df.Filename, err)
			}
			rs, err := decodeRows(tab, want)
			if err != nil {
				return nil, err
			}
			rows = append(rows, rs...)
		}
		out[split] = rows
	}
	return out, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("loadertest: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("loadertest: %s: %w", path, err)
	}
	return nil
}

// LoadJSONL loads a JSON Lines file as load_dataset("json") does in datasets
// ≥ 4.7, where objects of mixed shapes become Json values: each line's
// top-level keys with their values as exact JSON. An empty file has no
// rows, which datasets refuses.
func LoadJSONL(path string) ([]map[string]json.RawMessage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loadertest: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	var out []map[string]json.RawMessage
	for n := 1; sc.Scan(); n++ {
		var line map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, fmt.Errorf("loadertest: %s:%d: %w", path, n, err)
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("loadertest: %s: no rows (datasets cannot load an empty split)", path)
	}
	return out, nil
}

// SFTConversation is what TRL's SFTTrainer hands apply_chat_template for a
// conversational row (sft_trainer.py): row["messages"], and row["tools"],
// json.loads'd when it is a string. messages may be a JSON array (JSON
// Lines) or a list of Json values (hf).
func SFTConversation(messages, tools any) (Conversation, error) {
	var c Conversation
	var err error
	if c.Messages, err = jsonArray(messages); err != nil {
		return c, fmt.Errorf("loadertest: messages: %w", err)
	}
	if tools != nil {
		if c.Tools, err = jsonArray(tools); err != nil {
			return c, fmt.Errorf("loadertest: tools: %w", err)
		}
		if bytes.Equal(c.Tools, []byte("null")) {
			c.Tools = nil
		}
	}
	return c, nil
}

// jsonArray accepts a JSON array (json.RawMessage), a JSON string holding
// one, or a list of json.RawMessage values.
func jsonArray(v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case json.RawMessage:
		t := bytes.TrimSpace(x)
		if len(t) > 0 && t[0] == '"' {
			var s string
			if err := json.Unmarshal(t, &s); err != nil {
				return nil, err
			}
			return json.RawMessage(s), nil
		}
		return x, nil
	case string:
		return json.RawMessage(x), nil
	case []any:
		parts := make([]string, len(x))
		for i, it := range x {
			r, ok := it.(json.RawMessage)
			if !ok {
				return nil, fmt.Errorf("item %d is %T, not a Json value", i, it)
			}
			parts[i] = string(r)
		}
		return json.RawMessage("[" + strings.Join(parts, ",") + "]"), nil
	}
	return nil, fmt.Errorf("%T is not a JSON array", v)
}

// IgnoreIndex is the label of a token that does not count in the loss
// (PyTorch's cross-entropy ignore_index, which TRL uses).
const IgnoreIndex = -100

// TRLLabels is the labels column TRL's SFTTrainer builds for a
// pre-tokenized row (sft_trainer.py, build_labels, TRL 1.x): a row with
// input_ids is not tokenized again; each token is its own label where every
// mask column it has (assistant_masks; completion_mask only with
// completion_only_loss) is truthy, else IgnoreIndex.
func TRLLabels(row Row, completionOnlyLoss bool) ([]int64, error) {
	ids, ok := row["input_ids"].([]any)
	if !ok {
		return nil, fmt.Errorf("loadertest: input_ids is %T, not a list", row["input_ids"])
	}
	var masks [][]any
	for _, col := range []string{"completion_mask", "assistant_masks"} {
		if col == "completion_mask" && !completionOnlyLoss {
			continue
		}
		if m, ok := row[col].([]any); ok {
			masks = append(masks, m)
		}
	}
	labels := make([]int64, len(ids))
	for i, id := range ids {
		v, ok := id.(int64)
		if !ok {
			return nil, fmt.Errorf("loadertest: input_ids[%d] is %T, not an integer", i, id)
		}
		labels[i] = v
		for _, m := range masks {
			// zip(strict=False) stops at the shortest: a mask shorter than
			// the ids would drop tokens, which the caller sees as a shorter
			// labels list.
			if i >= len(m) {
				return labels[:i], nil
			}
			if bit, _ := m[i].(int64); bit == 0 {
				labels[i] = IgnoreIndex
			}
		}
	}
	return labels, nil
}

// VisionExample is one row of a VLM SFT data set as TRL's vision collator
// takes it: the messages a processor's chat template is given, and the
// images, in order, that the processor is given beside the rendered text.
type VisionExample struct {
	Messages json.RawMessage // a JSON array of message objects
	Images   [][]byte        // the encoded images (PNG), in order
	// Placeholders is how many {"type": "image"} content parts the
	// messages hold, in message and part order.
	Placeholders int
}

// TRLVision reads a loaded row (LoadHF) as TRL's vision-language SFT path
// does (trl docs dataset_formats.md "Vision datasets"; the collator's
// processor call): the messages column with content parts, and the images
// column, a list of datasets Image values that decode to pictures — an
// Image struct without bytes (datasets would read its path, which forkline
// never writes) or bytes that are not an image are refused, and so is a
// row whose {"type": "image"} parts and images differ in number, which a
// processor refuses ("the number of images in the text does not match").
func TRLVision(row Row) (VisionExample, error) {
	msgs, ok := row["messages"].([]any)
	if !ok {
		return VisionExample{}, fmt.Errorf("loadertest: messages is %T, not a list", row["messages"])
	}
	var ex VisionExample
	parts := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		raw, ok := m.(json.RawMessage)
		if !ok {
			return VisionExample{}, fmt.Errorf("loadertest: message %d is %T, not Json", i, m)
		}
		parts[i] = raw
		var msg struct {
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(raw, &msg); err != nil {
			return VisionExample{}, fmt.Errorf("loadertest: message %d: %w", i, err)
		}
		var content []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(msg.Content, &content) == nil {
			for _, c := range content {
				if c.Type == "image" {
					ex.Placeholders++
				}
			}
		}
	}
	b, err := json.Marshal(parts)
	if err != nil {
		return VisionExample{}, err
	}
	ex.Messages = b
	images, _ := row["images"].([]any)
	for i, im := range images {
		st, ok := im.(map[string]any)
		if !ok {
			return VisionExample{}, fmt.Errorf("loadertest: images[%d] is %T, not an Image struct", i, im)
		}
		data, _ := st["bytes"].([]byte)
		if len(data) == 0 {
			return VisionExample{}, fmt.Errorf("loadertest: images[%d] has no bytes (datasets would open its path %v)", i, st["path"])
		}
		if _, _, err := image.DecodeConfig(bytes.NewReader(data)); err != nil {
			return VisionExample{}, fmt.Errorf("loadertest: images[%d] is not an image: %w", i, err)
		}
		ex.Images = append(ex.Images, data)
	}
	if ex.Placeholders != len(ex.Images) {
		return VisionExample{}, fmt.Errorf("loadertest: %d image parts in the messages, %d images", ex.Placeholders, len(ex.Images))
	}
	return ex, nil
}

// VerlSFTVision reads a verl-sft row of a multimodal data set as
// MultiTurnSFTDataset does with image_key "images" (verl
// multiturn_sft_dataset.py, the multimodal branch): each message's string
// content is split on "<image>" into a list of parts, {"type": "image"}
// where a placeholder stood and {"type": "text"} between them, and the
// placeholders must be as many as the images (the dataset asserts it);
// each image must carry its bytes (process_image opens them; a null would
// reach BytesIO(None)).
func VerlSFTVision(row Row) (VisionExample, error) {
	msgs, ok := row["messages"].([]any)
	if !ok {
		return VisionExample{}, fmt.Errorf("loadertest: messages is %T, not a list", row["messages"])
	}
	var ex VisionExample
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		msg, ok := m.(map[string]any)
		if !ok {
			return VisionExample{}, fmt.Errorf("loadertest: message %d is %T, not a struct", i, m)
		}
		copied := map[string]any{}
		for k, v := range msg {
			if v != nil {
				copied[k] = v
			}
		}
		if content, ok := msg["content"].(string); ok && strings.Contains(content, "<image>") {
			var parts []map[string]any
			for j, piece := range strings.Split(content, "<image>") {
				if j > 0 {
					parts = append(parts, map[string]any{"type": "image"})
					ex.Placeholders++
				}
				if piece != "" {
					parts = append(parts, map[string]any{"type": "text", "text": piece})
				}
			}
			copied["content"] = parts
		}
		out[i] = copied
	}
	b, err := json.Marshal(out)
	if err != nil {
		return VisionExample{}, err
	}
	ex.Messages = b
	images, _ := row["images"].([]any)
	for i, im := range images {
		st, _ := im.(map[string]any)
		data, _ := st["bytes"].([]byte)
		if len(data) == 0 {
			return VisionExample{}, fmt.Errorf("loadertest: images[%d] has no bytes", i)
		}
		if _, _, err := image.DecodeConfig(bytes.NewReader(data)); err != nil {
			return VisionExample{}, fmt.Errorf("loadertest: images[%d] is not an image: %w", i, err)
		}
		ex.Images = append(ex.Images, data)
	}
	if ex.Placeholders != len(ex.Images) {
		return VisionExample{}, fmt.Errorf("loadertest: %d <image> placeholders, %d images", ex.Placeholders, len(ex.Images))
	}
	return ex, nil
}
