package hf

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"

	"github.com/forkline/forkline/formats/model"
)

// DefaultMaxShardBytes is the size after which a split continues in a new
// shard file, as datasets' push_to_hub and save_to_disk do (500 MB).
const DefaultMaxShardBytes = 500 << 20

// Options configure the hf and hf-disk writers.
type Options struct {
	Rows RowsPer // RowsEpisode when empty
	// MaxShardBytes starts a new shard file once a split's current one is
	// this big; DefaultMaxShardBytes when 0. A shard always holds whole
	// episodes, so it can exceed the limit by one episode.
	MaxShardBytes int64
	// Provenance lines (sources, selection) for the dataset card.
	Provenance []string
	// Conversation shapes the messages column (tool-call arguments, the
	// content beside calls, reasoning).
	Conversation model.Options
	// Card metadata: the dataset card's license, task_categories and
	// language (Hugging Face Hub identifiers; left out when empty).
	License        string
	TaskCategories []string
	Languages      []string
	// BatchRows and BatchBytes override the TableWriter defaults (tests).
	BatchRows  int
	BatchBytes int64
}

// Writer writes the hf target (Parquet files, a dataset card) or the
// hf-disk target (save_to_disk layout). See the package documentation for
// the layouts. It is not safe for concurrent use.
type Writer struct {
	dir    string
	disk   bool
	opt    Options
	fs     model.Features
	tools  map[string]any // ToolValues by model.Episode.ToolsKey
	splits []*splitOut
	byName map[string]*splitOut
	err    error
}

type splitOut struct {
	name   string
	shards []string // temporary file names, in order
	cur    *shardFile
	rows   int64
	bytes  int64     // the split's files' sizes, once they are closed
	sum    hash.Hash // over every shard's bytes, for hf-disk's fingerprint
	// unsuccessful counts episodes that did not end in done or whose reward
	// is null or below 1, for the card.
	unsuccessful int64
}

type shardFile struct {
	f   *os.File
	cw  *countingWriter
	tw  *model.TableWriter
	tmp string
}

// NewWriter starts the hf target in dir: data/<split>-NNNNN-of-MMMMM.parquet
// and README.md.
func NewWriter(dir string, splits []string, opt Options) (*Writer, error) {
	return newWriter(dir, splits, opt, false)
}

// NewDiskWriter starts the hf-disk target in dir: dataset_dict.json and per
// split <split>/data-NNNNN-of-MMMMM.arrow, state.json, dataset_info.json.
func NewDiskWriter(dir string, splits []string, opt Options) (*Writer, error) {
	return newWriter(dir, splits, opt, true)
}

func newWriter(dir string, splits []string, opt Options, disk bool) (*Writer, error) {
	if opt.Rows == "" {
		opt.Rows = RowsEpisode
	}
	if opt.Rows != RowsTokens && opt.Rows != RowsTokenTurns {
		if _, err := ParseRows(string(opt.Rows)); err != nil {
			return nil, err
		}
	}
	if err := checkCardMeta(opt); err != nil {
		return nil, err
	}
	opt.Conversation = opt.Conversation.WithDefaults()
	if opt.MaxShardBytes <= 0 {
		opt.MaxShardBytes = DefaultMaxShardBytes
	}
	w := &Writer{dir: dir, disk: disk, opt: opt, fs: FeaturesFor(opt.Rows), tools: map[string]any{}, byName: map[string]*splitOut{}}
	for _, name := range splits {
		s := &splitOut{name: name, sum: sha256.New()}
		w.splits = append(w.splits, s)
		w.byName[name] = s
	}
	// A split's first shard is opened with its first row: a split that gets
	// no episode is not written at all. datasets cannot load an empty split
	// (arrow_reader.py skips files with no rows, then raises "corresponds to
	// no data"), and verl's loaders go through the same reader.
	return w, nil
}

func (w *Writer) shardTmp(s *splitOut, i int) string {
	if w.disk {
		return filepath.Join(w.dir, s.name, fmt.Sprintf(".data-%05d.arrow.tmp", i))
	}
	return filepath.Join(w.dir, "data", fmt.Sprintf(".%s-%05d.parquet.tmp", s.name, i))
}

func (w *Writer) shardFinal(s *splitOut, i int) string {
	n := len(s.shards)
	if w.disk {
		return filepath.Join(w.dir, s.name, fmt.Sprintf("data-%05d-of-%05d.arrow", i, n))
	}
	return filepath.Join(w.dir, "data", fmt.Sprintf("%s-%05d-of-%05d.parquet", s.name, i, n))
}

func (w *Writer) openShard(s *splitOut) error {
	sub := filepath.Join(w.dir, "data")
	if w.disk {
		sub = filepath.Join(w.dir, s.name)
	}
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	tmp := w.shardTmp(s, len(s.shards))
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	cw := &countingWriter{w: f, sum: s.sum}
	var tw *model.TableWriter
	if w.disk {
		tw, err = model.NewStreamWriter(cw, w.fs)
	} else {
		tw, err = model.NewParquetWriter(cw, w.fs)
	}
	if err != nil {
		f.Close()
		return err
	}
	tw.BatchRows, tw.BatchBytes = w.opt.BatchRows, w.opt.BatchBytes
	s.cur = &shardFile{f: f, cw: cw, tw: tw, tmp: tmp}
	s.shards = append(s.shards, tmp)
	return nil
}

func (w *Writer) closeShard(s *splitOut) error {
	sf := s.cur
	s.cur = nil
	err := sf.tw.Close()
	if err == nil {
		err = sf.f.Sync()
	}
	if cerr := sf.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("hf: %s: %w", sf.tmp, err)
	}
	return nil
}

// Write appends ep's row (or its step rows) to its split.
func (w *Writer) Write(ep *model.Episode) error {
	if w.err != nil {
		return w.err
	}
	s, ok := w.byName[ep.Split]
	if !ok {
		return fmt.Errorf("hf: episode %s: unknown split %q", ep.Row.EpisodeID, ep.Split)
	}
	if s.cur == nil {
		if err := w.openShard(s); err != nil {
			w.err = err
			return err
		}
	}
	var err error
	var ref *model.Refusal
	switch w.opt.Rows {
	case RowsTokens, RowsTokenTurns:
		err = TokenRows(ep, w.opt.Rows == RowsTokenTurns, func(r model.Row) error { s.rows++; return s.cur.tw.Append(r) })
		if errors.As(err, &ref) {
			return err // nothing was appended
		}
	case RowsStep:
		err = StepRows(ep, func(r model.Row) error { s.rows++; return s.cur.tw.Append(r) })
	default:
		tools, ok := w.tools[ep.ToolsKey()]
		if !ok {
			tools = ToolValues(ep)
			w.tools[ep.ToolsKey()] = tools
		}
		var r model.Row
		if r, err = EpisodeRow(ep, tools, w.opt.Conversation); err == nil {
			s.rows++
			err = s.cur.tw.Append(r)
		}
	}
	if r := ep.Reward(); ep.Row.ExitReason != "done" || r == nil || *r < 1 {
		s.unsuccessful++
	}
	if err != nil {
		w.err = fmt.Errorf("hf: episode %s: %w", ep.Row.EpisodeID, err)
		return w.err
	}
	if s.cur.tw.Size() >= w.opt.MaxShardBytes {
		if err := w.closeShard(s); err != nil {
			w.err = err
			return err
		}
	}
	return nil
}

// Close finishes every shard, names them NNNNN-of-MMMMM and writes the
// metadata files. After a failed Write it only closes the files.
func (w *Writer) Close() error {
	if w.err != nil {
		w.abandon()
		return w.err
	}
	for _, s := range w.splits {
		if s.cur != nil {
			if err := w.closeShard(s); err != nil {
				w.abandon()
				return err
			}
		}
		if s.rows == 0 {
			// Step rows of episodes without steps: nothing to load.
			for _, tmp := range s.shards {
				os.Remove(tmp)
			}
			s.shards = nil
			continue
		}
		for i, tmp := range s.shards {
			final := w.shardFinal(s, i)
			if err := os.Rename(tmp, final); err != nil {
				return fmt.Errorf("hf: %w", err)
			}
			st, err := os.Stat(final)
			if err != nil {
				return fmt.Errorf("hf: %w", err)
			}
			s.bytes += st.Size()
		}
	}
	if w.disk {
		return w.writeDiskMetadata()
	}
	return writeFile(filepath.Join(w.dir, "README.md"), []byte(w.card()))
}

func (w *Writer) abandon() {
	for _, s := range w.splits {
		if s.cur != nil {
			s.cur.tw.Close()
			s.cur.f.Close()
			s.cur = nil
		}
	}
}

// written returns the splits that got rows, in split order.
func (w *Writer) written() []*splitOut {
	var out []*splitOut
	for _, s := range w.splits {
		if s.rows > 0 {
			out = append(out, s)
		}
	}
	return out
}

// Rows returns the rows written per split, in split order.
func (w *Writer) Rows() map[string]int64 {
	out := map[string]int64{}
	for _, s := range w.splits {
		out[s.name] = s.rows
	}
	return out
}

// writeDiskMetadata writes what load_from_disk reads: dataset_dict.json at
// the top, and state.json and dataset_info.json per split.
func (w *Writer) writeDiskMetadata() error {
	names := []string{}
	for _, s := range w.written() {
		names = append(names, s.name)
	}
	dict, err := json.Marshal(map[string]any{"splits": names})
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(w.dir, "dataset_dict.json"), dict); err != nil {
		return err
	}
	info := DiskInfo(w.fs, "Agent trajectories exported by forkline, one row per "+string(w.opt.Rows)+".", w.opt.License)
	for _, s := range w.written() {
		files := make([]map[string]string, len(s.shards))
		for i := range s.shards {
			files[i] = map[string]string{"filename": filepath.Base(w.shardFinal(s, i))}
		}
		state := DiskState{
			DataFiles:        files,
			Fingerprint:      hex.EncodeToString(s.sum.Sum(nil))[:16],
			FormatKwargs:     map[string]any{},
			OutputAllColumns: false,
			Split:            s.name,
			FormatColumns:    nil, // null: every column
			FormatType:       nil, // null: Python objects
		}
		b, err := state.JSON()
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(w.dir, s.name, "state.json"), b); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(w.dir, s.name, "dataset_info.json"), info); err != nil {
			return err
		}
	}
	return nil
}

// DiskState is a split's state.json. load_from_disk reads all seven keys.
type DiskState struct {
	DataFiles        []map[string]string `json:"_data_files"`
	Fingerprint      string              `json:"_fingerprint"`
	FormatColumns    []string            `json:"_format_columns"`
	FormatKwargs     map[string]any      `json:"_format_kwargs"`
	FormatType       *string             `json:"_format_type"`
	OutputAllColumns bool                `json:"_output_all_columns"`
	Split            string              `json:"_split"`
}

// JSON encodes the state as datasets does: indent 2, keys sorted (the
// struct's field order is the sorted order).
func (s DiskState) JSON() ([]byte, error) {
	return json.MarshalIndent(s, "", "  ")
}

// DiskInfo is a split's dataset_info.json: DatasetInfo's fields with keys
// sorted, features in the portable encoding (see Features.JSON).
func DiskInfo(fs model.Features, description, license string) []byte {
	info := map[string]json.RawMessage{
		"citation":    json.RawMessage(`""`),
		"description": jsonString(description),
		"features":    fs.JSON(),
		"homepage":    json.RawMessage(`""`),
		"license":     jsonString(license),
	}
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// writeFile writes a small file and syncs it.
func writeFile(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	return nil
}

// countingWriter counts and hashes what passes through it.
type countingWriter struct {
	w   *os.File
	n   int64
	sum hash.Hash
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.sum.Write(p[:n])
	return n, err
}
