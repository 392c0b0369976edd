package shard

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"path"
	"slices"
	"sync"

	"github.com/forkline/forkline/schemas"
	"github.com/parquet-go/parquet-go"
)

// Rows read per batch. Blob rows are large (screenshots), so fewer.
const (
	readBatchRows = 256
	readBatchBlob = 8
	readBatchKeys = 4096
)

// Dataset reads a dataset directory. It reads only the shards its manifest
// lists, so a run that is still being written, or crashed, reads as its
// closed generations. It is safe for concurrent use.
type Dataset struct {
	dir string
	m   Manifest
	src *source

	blobOnce sync.Once
	blobIdx  map[string]blobLoc
	blobErr  error

	// The episodes' lineage, read once (Tree and EachTrajectory both need
	// it, and an export calls both): the manifest, and so the shards, are
	// fixed when the Dataset is opened.
	lineageOnce sync.Once
	lineage     *lineage
	lineageErr  error
}

type blobLoc struct {
	shard ShardInfo
	row   int64
}

// Open reads dir's manifest. It fails with ErrNoDataset when there is none,
// with ErrSchemaVersion for a schema version this build does not read, and
// with ErrCorrupt when a shard entry is malformed or the manifest's
// bookkeeping does not hold together (checkManifest).
func Open(dir string) (*Dataset, error) {
	m, err := readManifest(dir)
	if err != nil {
		return nil, err
	}
	for _, s := range m.Shards {
		if err := checkShardEntry(s); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(m.Shards, compareShards)
	return newDataset(dir, m), nil
}

func newDataset(dir string, m Manifest) *Dataset {
	return &Dataset{dir: dir, m: m, src: newSource(dir, m.RunID)}
}

// checkShardEntry rejects a manifest entry that names an unknown table or
// a file outside its table's directory.
func checkShardEntry(s ShardInfo) error {
	if _, err := schemas.RowType(s.Table); err != nil {
		return fmt.Errorf("%w: shard %q: %v", ErrCorrupt, s.File, err)
	}
	if want := path.Join(s.Table, shardName(s.Generation)); s.File != want {
		return fmt.Errorf("%w: shard %q of table %s generation %d should be %q", ErrCorrupt, s.File, s.Table, s.Generation, want)
	}
	return nil
}

// compareShards orders shards by generation, then in schemas.Tables order.
func compareShards(a, b ShardInfo) int {
	if a.Generation != b.Generation {
		return a.Generation - b.Generation
	}
	return slices.Index(schemas.Tables, a.Table) - slices.Index(schemas.Tables, b.Table)
}

// blobsOnly reports whether generation gen has a blobs shard and no other:
// what Writer.Drop leaves of a generation whose episodes it moved.
func (d *Dataset) blobsOnly(gen int) bool {
	n := 0
	for _, s := range d.m.Shards {
		if s.Generation == gen {
			if s.Table != schemas.TableBlobs {
				return false
			}
			n++
		}
	}
	return n > 0
}

// Dir returns the dataset directory.
func (d *Dataset) Dir() string { return d.dir }

// Manifest returns a copy of the manifest, shards in generation order.
func (d *Dataset) Manifest() Manifest { return d.m.Clone() }

// Shards returns a table's listed shards in generation order.
func (d *Dataset) Shards(table string) []ShardInfo {
	var out []ShardInfo
	for _, s := range d.m.Shards {
		if s.Table == table {
			out = append(out, s)
		}
	}
	return out
}

// Check checks every listed shard against its manifest entry, as reading
// it would — size, sha256 (the whole file), then the footer's row count,
// schema version, table and run id — without decoding a row. The error is
// the first mismatch, wrapping ErrCorrupt and naming the file. A reader
// that goes on to read only some tables (a resume that finds nothing to
// do) calls it so that damage anywhere is found; a shard it checked is not
// hashed again when read through this Dataset.
func (d *Dataset) Check() error {
	for _, s := range d.m.Shards {
		if err := checkShardEntry(s); err != nil {
			return err
		}
		if err := d.src.check(s); err != nil {
			return err
		}
	}
	return nil
}

// shard returns a table's shard of generation gen, if any.
func (d *Dataset) shard(table string, gen int) (ShardInfo, bool) {
	for _, s := range d.m.Shards {
		if s.Table == table && s.Generation == gen {
			return s, true
		}
	}
	return ShardInfo{}, false
}

// Episodes streams the episodes table, shard by shard in generation order.
// The iteration stops after yielding an error.
func (d *Dataset) Episodes() iter.Seq2[schemas.EpisodeRow, error] {
	return readShards[schemas.EpisodeRow](d.src, d.Shards(schemas.TableEpisodes), readBatchRows)
}

// Steps streams the steps table, shard by shard in generation order; within
// a shard, in the episodes' order and then in step order.
func (d *Dataset) Steps() iter.Seq2[schemas.StepRow, error] {
	return readShards[schemas.StepRow](d.src, d.Shards(schemas.TableSteps), readBatchRows)
}

// Rewards streams the rewards table in generation order.
func (d *Dataset) Rewards() iter.Seq2[schemas.RewardRow, error] {
	return readShards[schemas.RewardRow](d.src, d.Shards(schemas.TableRewards), readBatchRows)
}

// Blobs streams the blobs table in generation order. A hash may appear once
// per generation.
func (d *Dataset) Blobs() iter.Seq2[schemas.BlobRow, error] {
	return readShards[schemas.BlobRow](d.src, d.Shards(schemas.TableBlobs), readBatchBlob)
}

// Blob returns the payload with the given hex sha256, or ErrBlobNotFound.
// The first call indexes the blobs' hash column (not their data).
func (d *Dataset) Blob(sha256 string) ([]byte, error) {
	d.blobOnce.Do(d.indexBlobs)
	if d.blobErr != nil {
		return nil, d.blobErr
	}
	loc, ok := d.blobIdx[sha256]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrBlobNotFound, sha256)
	}
	f, pf, err := d.src.open(loc.shard)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	path := d.src.path(loc.shard)
	r, err := newReader[schemas.BlobRow](pf)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	defer r.Close()
	if err := seekRow(r, loc.row); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	row := make([]schemas.BlobRow, 1)
	if n, err := readRows(r, row); n != 1 {
		return nil, fmt.Errorf("%w: %s row %d: %v", ErrCorrupt, path, loc.row, err)
	}
	if row[0].SHA256 != sha256 {
		return nil, fmt.Errorf("%w: %s row %d has blob %s, the index says %s", ErrCorrupt, path, loc.row, row[0].SHA256, sha256)
	}
	return row[0].Data, nil
}

type keyRow struct {
	SHA256 string `parquet:"sha256"`
}

func (d *Dataset) indexBlobs() {
	d.blobIdx = map[string]blobLoc{}
	for _, s := range d.Shards(schemas.TableBlobs) {
		var row int64
		for k, err := range readShard[keyRow](d.src, s, readBatchKeys) {
			if err != nil {
				d.blobErr = err
				return
			}
			if _, dup := d.blobIdx[k.SHA256]; !dup {
				d.blobIdx[k.SHA256] = blobLoc{shard: s, row: row}
			}
			row++
		}
	}
}

// EachEpisode calls fn for every episode with its steps in step order and
// its rewards, generation by generation. It holds one episode in memory at
// a time: within a generation, steps and rewards follow the episodes'
// order. It stops at the first error, fn's included, and returns it.
func (d *Dataset) EachEpisode(fn func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error) error {
	for _, gen := range d.m.Generations() {
		if err := d.eachEpisodeOf(gen, true, fn); err != nil {
			return err
		}
	}
	return nil
}

// EachEpisodeRewards is EachEpisode without the steps: it calls fn for
// every episode with its rewards and never reads the steps table, which
// holds nearly all of a dataset's bytes (outputs, screenshots, tokens).
func (d *Dataset) EachEpisodeRewards(fn func(ep schemas.EpisodeRow, rewards []schemas.RewardRow) error) error {
	for _, gen := range d.m.Generations() {
		err := d.eachEpisodeOf(gen, false, func(ep schemas.EpisodeRow, _ []schemas.StepRow, rw []schemas.RewardRow) error {
			return fn(ep, rw)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// EachEpisodeIn is EachEpisode over generation gen only (a reader that
// knows an episode's generation reads one shard of each table).
func (d *Dataset) EachEpisodeIn(gen int, fn func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error) error {
	return d.eachEpisodeOf(gen, true, fn)
}

// maxStepPrealloc bounds the step rows eachEpisodeOf makes room for ahead
// of reading them.
const maxStepPrealloc = 1024

// eachEpisodeOf walks generation gen's episodes with their rewards, and
// with their steps when withSteps (else the steps table is not read).
func (d *Dataset) eachEpisodeOf(gen int, withSteps bool, fn func(schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) error) error {
	eps, ok := d.shard(schemas.TableEpisodes, gen)
	if !ok {
		if d.blobsOnly(gen) {
			return nil
		}
		return fmt.Errorf("%w: generation %d has shards but no episodes shard", ErrCorrupt, gen)
	}
	steps := &puller[schemas.StepRow]{stop: func() {}}
	if withSteps {
		steps = pullShard[schemas.StepRow](d, schemas.TableSteps, gen)
	}
	defer steps.stop()
	rewards := pullShard[schemas.RewardRow](d, schemas.TableRewards, gen)
	defer rewards.stop()
	episodes := pullRows[schemas.EpisodeRow](d.src, eps)
	defer episodes.stop()

	for ; episodes.ok; episodes.advance() {
		ep := episodes.cur
		var st []schemas.StepRow
		if withSteps && ep.Steps > 0 {
			// Room for the steps the row says follow, made once (growing
			// from nil allocated more than twice the rows an export
			// reads). The count is the file's word, so only up to
			// maxStepPrealloc; a longer episode grows past it.
			st = make([]schemas.StepRow, 0, min(int(ep.Steps), maxStepPrealloc))
		}
		for steps.ok && steps.cur.EpisodeID == ep.EpisodeID {
			st = append(st, steps.cur)
			steps.advance()
		}
		if steps.err != nil {
			return steps.err
		}
		var rw []schemas.RewardRow
		for rewards.ok && rewards.cur.EpisodeID == ep.EpisodeID {
			rw = append(rw, rewards.cur)
			rewards.advance()
		}
		if rewards.err != nil {
			return rewards.err
		}
		if withSteps && int(ep.Steps) != len(st) {
			return fmt.Errorf("%w: generation %d: episode %q has steps = %d but %d step rows follow the episodes' order",
				ErrCorrupt, gen, ep.EpisodeID, ep.Steps, len(st))
		}
		first := ep.FirstStep()
		for i := range st {
			if int(st[i].StepIndex) != first+i {
				return fmt.Errorf("%w: generation %d: episode %q: step row %d has step_index %d, want %d", ErrCorrupt, gen, ep.EpisodeID, i, st[i].StepIndex, first+i)
			}
		}
		if err := fn(ep, st, rw); err != nil {
			return err
		}
	}
	if episodes.err != nil {
		return episodes.err
	}
	if steps.ok {
		return fmt.Errorf("%w: generation %d: step rows of episode %q do not follow the episodes' order", ErrCorrupt, gen, steps.cur.EpisodeID)
	}
	if rewards.ok {
		return fmt.Errorf("%w: generation %d: reward rows of episode %q do not follow the episodes' order", ErrCorrupt, gen, rewards.cur.EpisodeID)
	}
	return nil
}

// puller turns a row stream into a cursor with one row of look-ahead.
type puller[T any] struct {
	next func() (T, error, bool)
	stop func()
	cur  T
	ok   bool // cur holds a row
	err  error
}

func (p *puller[T]) advance() {
	row, err, ok := p.next()
	switch {
	case !ok:
		p.ok = false
	case err != nil:
		p.ok, p.err = false, err
	default:
		p.cur, p.ok = row, true
	}
}

func pullShard[T any](d *Dataset, table string, gen int) *puller[T] {
	s, ok := d.shard(table, gen)
	if !ok {
		return &puller[T]{stop: func() {}}
	}
	return pullRows[T](d.src, s)
}

// pullRows is a cursor over shard s's rows: read column-wise (colRows)
// when T is a table's row type and the file's columns have its shape,
// else by parquet-go's row reader.
func pullRows[T any](src *source, s ShardInfo) *puller[T] {
	p := &puller[T]{}
	if fields := layoutFor[T](); fields != nil {
		r, err := openColRows[T](src, s, fields)
		switch {
		case err == nil:
			p.next, p.stop = r.next, r.close
			p.advance()
			return p
		case !errors.Is(err, errNotFlat):
			p.err, p.stop = err, func() {}
			return p
		}
	}
	p.next, p.stop = iter.Pull2(readShard[T](src, s, readBatchRows))
	p.advance()
	return p
}

// readShards streams the rows of several shards in order.
// normalized is a row as it was written: parquet-go reads an empty list of
// strings back as an empty slice where other lists come back nil, so a
// step's prompt_images reads as the nil it was written as.
func normalized[T any](row T) T {
	if s, ok := any(&row).(*schemas.StepRow); ok && len(s.PromptImages) == 0 {
		s.PromptImages = nil
	}
	return row
}

func readShards[T any](src *source, shards []ShardInfo, batch int) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for _, s := range shards {
			for row, err := range readShard[T](src, s, batch) {
				if !yield(row, err) || err != nil {
					return
				}
			}
		}
	}
}

// readShard streams one shard's rows, batch rows at a time, after src has
// checked the file (size, sha256, footer). T may be a projection of the
// table's row type (a struct with some of its columns). A shard that cannot
// be decoded is ErrCorrupt naming the file.
func readShard[T any](src *source, s ShardInfo, batch int) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		f, pf, err := src.open(s)
		if err != nil {
			yield(zero, err)
			return
		}
		defer f.Close()
		path := src.path(s)
		r, err := newReader[T](pf)
		if err != nil {
			yield(zero, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err))
			return
		}
		defer r.Close()
		buf := make([]T, batch)
		var seen int64
		for {
			clear(buf) // rows handed out must not share memory with the next batch
			n, err := readRows(r, buf)
			for i := range n {
				if !yield(normalized(buf[i]), nil) {
					return
				}
			}
			seen += int64(n)
			if errors.Is(err, io.EOF) || (err == nil && n == 0) {
				if seen != s.Rows {
					yield(zero, fmt.Errorf("%w: %s: read %d rows, the manifest says %d", ErrCorrupt, path, seen, s.Rows))
				}
				return
			}
			if err != nil {
				yield(zero, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err))
				return
			}
		}
	}
}

// newReader is parquet.NewGenericReader, which panics on a schema that
// does not fit T, returning an error instead.
func newReader[T any](pf *parquet.File) (r *parquet.GenericReader[T], err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("schema does not fit %T: %v", *new(T), p)
		}
	}()
	return parquet.NewGenericReader[T](pf), nil
}

type episodeKey struct {
	EpisodeID string `parquet:"episode_id"`
}

type episodeExit struct {
	EpisodeID  string `parquet:"episode_id"`
	ExitReason string `parquet:"exit_reason"`
}

// readEpisodeIDs streams the episode_id column of a shard.
func readEpisodeIDs(src *source, s ShardInfo) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for k, err := range readShard[episodeKey](src, s, readBatchKeys) {
			if !yield(k.EpisodeID, err) || err != nil {
				return
			}
		}
	}
}
