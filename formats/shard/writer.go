package shard

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/forkline/forkline/schemas"
	"github.com/parquet-go/parquet-go/compress"
)

// Writer writes one run's dataset. See the package documentation for the
// generation protocol. It is safe for concurrent use.
type Writer struct {
	dir   string
	cfg   Config
	codec compress.Codec
	runID string
	lock  *os.File
	src   *source       // reads back closed shards (Drop), verified
	side  *tasksSidecar // the tasks sidecar the manifest references

	// sem is a one-slot lock, so that Commit can stop waiting when its
	// context ends.
	sem chan struct{}

	// Guarded by sem.
	m         Manifest
	committed map[string]bool   // episode ids in closed generations
	exits     map[string]string // their exit reasons
	gen       *generation       // the open generation, nil when none
	nextGen   int
	broken    error // the first write error; the Writer refuses work after it
	closed    bool
	closeErr  error

	removed []string               // what Resume deleted; immutable after Resume
	onRoll  func(GenerationClosed) // OnGeneration; set before the first Commit

	stopOnce sync.Once
	stop     chan struct{}
	tickDone chan struct{}
}

// generation is the open generation: its lazily created table files and
// the episodes and blobs written to it.
type generation struct {
	num      int
	opened   time.Time
	bytes    int64
	episodes map[string]string // id → exit reason
	blobs    map[string]bool

	steps    *tableFile[schemas.StepRow]
	episodeF *tableFile[schemas.EpisodeRow]
	rewards  *tableFile[schemas.RewardRow]
	blobF    *tableFile[schemas.BlobRow]
}

// files returns the generation's open files in schemas.Tables order.
func (g *generation) files() []shardWriter {
	var out []shardWriter
	if g.steps != nil {
		out = append(out, g.steps)
	}
	if g.episodeF != nil {
		out = append(out, g.episodeF)
	}
	if g.rewards != nil {
		out = append(out, g.rewards)
	}
	if g.blobF != nil {
		out = append(out, g.blobF)
	}
	return out
}

// episode returns the exit reason of episode id when g holds it; g may be
// nil.
func (g *generation) episode(id string) (string, bool) {
	if g == nil {
		return "", false
	}
	exit, ok := g.episodes[id]
	return exit, ok
}

func (g *generation) abandon() {
	for _, f := range g.files() {
		f.abandon()
	}
}

// Create starts a new run in dir, creating it if needed. dir must not hold
// a dataset: a manifest or shard files make Create fail with ErrExists.
// m supplies the collector's fields and RunID, which is required; Create
// sets SchemaVersion, Tool (when empty), Status running, the timestamps,
// Shards and Counts, and writes the manifest at once.
func Create(dir string, m Manifest, cfg Config) (*Writer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if m.RunID == "" {
		return nil, errors.New("shard: create: the manifest needs a run id")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("shard: create: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Writer, error) {
		unlockDir(lock)
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err == nil {
		return fail(fmt.Errorf("%w: %s holds a %s; use -resume to continue the run or -force to start over",
			ErrExists, dir, ManifestFile))
	}
	for _, table := range schemas.Tables {
		entries, err := os.ReadDir(filepath.Join(dir, table))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail(fmt.Errorf("shard: create: %w", err))
		}
		if len(entries) > 0 {
			return fail(fmt.Errorf("%w: %s holds files but no %s; use -force to start over",
				ErrExists, filepath.Join(dir, table), ManifestFile))
		}
		if err := os.MkdirAll(filepath.Join(dir, table), 0o755); err != nil {
			return fail(fmt.Errorf("shard: create: %w", err))
		}
	}
	now := time.Now().UTC()
	m = m.Clone()
	m.SchemaVersion = schemas.Version
	if m.Tool == "" {
		m.Tool = ToolName
	}
	m.Status = StatusRunning
	if m.CreatedAt.IsZero() {
		m.CreatedAt = now
	}
	m.UpdatedAt = now
	m.Shards = []ShardInfo{}
	m.Counts = zeroCounts()
	m.TasksFile = nil
	// Reserve room for the final manifest before writing anything, so that
	// a disk too full to hold even that refuses the run at once.
	if err := reserve(dir, reserveBytes(inlineTasks(m)+4096)); err != nil {
		unreserve(dir)
		return fail(err)
	}
	side := &tasksSidecar{}
	n, err := writeManifest(dir, m, side)
	if err != nil {
		unreserve(dir)
		return fail(err)
	}
	m.TasksFile = side.current()
	w := newWriter(dir, m, cfg, lock, map[string]string{}, 0, nil, newSource(dir, m.RunID), side)
	w.growReserve(n)
	return w, nil
}

func zeroCounts() map[string]int64 {
	c := make(map[string]int64, len(schemas.Tables))
	for _, t := range schemas.Tables {
		c[t] = 0
	}
	return c
}

func newWriter(dir string, m Manifest, cfg Config, lock *os.File, exits map[string]string, nextGen int, removed []string,
	src *source, side *tasksSidecar) *Writer {
	codec, _ := cfg.codec() // validated
	committed := make(map[string]bool, len(exits))
	for id := range exits {
		committed[id] = true
	}
	w := &Writer{
		dir:       dir,
		cfg:       cfg,
		codec:     codec,
		runID:     m.RunID,
		lock:      lock,
		src:       src,
		side:      side,
		sem:       make(chan struct{}, 1),
		m:         m,
		committed: committed,
		exits:     exits,
		nextGen:   nextGen,
		removed:   removed,
		stop:      make(chan struct{}),
		tickDone:  make(chan struct{}),
	}
	go w.tick()
	return w
}

// Resume reopens the run in dir after a crash or a stop. It first checks
// every listed shard against the manifest (size, sha256, footer, run id;
// ErrCorrupt naming the file otherwise) and reads the committed episode
// ids; a refused Resume changes no file. Then it deletes leftover
// temporary files, every shard file that the manifest does not list and
// unreferenced tasks sidecars (Removed reports them), continues the
// generation numbering and sets the status to running.
func Resume(dir string, cfg Config) (*Writer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s", ErrNoDataset, dir, ManifestFile)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	// Read under the lock: a Writer that closed meanwhile wrote a newer one.
	m, err := readManifest(dir)
	if err != nil {
		unlockDir(lock)
		return nil, err
	}
	w, err := resume(dir, m, cfg, lock)
	if err != nil {
		unlockDir(lock)
		return nil, err
	}
	return w, nil
}

func resume(dir string, m Manifest, cfg Config, lock *os.File) (*Writer, error) {
	// Read-only checks first: a refused Resume must leave every byte as it
	// was.
	nextGen := 0
	for _, s := range m.Shards {
		if err := checkShardEntry(s); err != nil {
			return nil, err
		}
		nextGen = max(nextGen, s.Generation+1)
	}
	src := newSource(dir, m.RunID)
	for _, s := range m.Shards {
		if err := src.check(s); err != nil {
			return nil, err
		}
	}
	exits := map[string]string{}
	for _, s := range m.Shards {
		if s.Table != schemas.TableEpisodes {
			continue
		}
		for k, err := range readShard[episodeExit](src, s, readBatchKeys) {
			if err != nil {
				return nil, err
			}
			exits[k.EpisodeID] = k.ExitReason
		}
	}

	entries, err := scanDataset(dir, &m)
	if err != nil {
		return nil, fmt.Errorf("shard: resume: %w", err)
	}
	var removed []string
	touched := map[string]bool{}
	for _, e := range entries {
		if e.kind != kindLeftover {
			continue
		}
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(e.rel))); err != nil {
			return nil, fmt.Errorf("shard: resume: %w", err)
		}
		removed = append(removed, e.rel)
		touched[filepath.Dir(filepath.Join(dir, filepath.FromSlash(e.rel)))] = true
	}
	for d := range touched {
		if err := syncDir(d); err != nil {
			return nil, fmt.Errorf("shard: resume: %w", err)
		}
	}
	for _, table := range schemas.Tables {
		if err := os.MkdirAll(filepath.Join(dir, table), 0o755); err != nil {
			return nil, fmt.Errorf("shard: resume: %w", err)
		}
	}
	if err := reserve(dir, reserveBytes(inlineTasks(m)+len(m.Shards)*256+4096)); err != nil {
		return nil, err
	}
	m.Status = StatusRunning
	m.UpdatedAt = time.Now().UTC()
	side := &tasksSidecar{}
	side.remember(m.Tasks, m.TasksFile)
	n, err := writeManifest(dir, m, side)
	if err != nil {
		return nil, err
	}
	m.TasksFile = side.current()
	w := newWriter(dir, m, cfg, lock, exits, nextGen, removed, src, side)
	w.growReserve(n)
	return w, nil
}

// inlineTasks is how many bytes m's tasks take inside the manifest: none
// when they go to a sidecar.
func inlineTasks(m Manifest) int {
	if len(m.Tasks) > TasksInlineMax {
		return 0
	}
	return len(m.Tasks)
}

// growReserve keeps the reserve at what a manifest of n bytes needs. It is
// best effort: on a disk that is filling, the reserve keeps the size it
// has, and the next write that fails breaks the Writer anyway.
func (w *Writer) growReserve(n int) {
	reserve(w.dir, reserveBytes(n))
}

// Removed lists the files Resume deleted, relative to the dataset: leftover
// temporary files and shards of a generation that never reached the
// manifest. It is empty for a Writer from Create.
func (w *Writer) Removed() []string { return slices.Clone(w.removed) }

// Dir returns the dataset directory.
func (w *Writer) Dir() string { return w.dir }

func (w *Writer) acquire(ctx context.Context) error {
	select {
	case w.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Writer) release() { <-w.sem }

// Committed returns the ids of the episodes in closed generations: the ones
// a resumed run must not run again. The map is a copy.
func (w *Writer) Committed() map[string]bool {
	w.acquire(context.Background())
	defer w.release()
	return maps.Clone(w.committed)
}

// Manifest returns a copy of the manifest as it will next be written.
func (w *Writer) Manifest() Manifest {
	w.acquire(context.Background())
	defer w.release()
	return w.m.Clone()
}

// Update lets the collector change its fields of the manifest (Summary,
// Plan, ToolVersion, ...). Changes to the fields the writer owns
// (SchemaVersion, RunID, Status, CreatedAt, UpdatedAt, TasksFile, Shards,
// Counts) are ignored. The change is persisted at the next manifest write:
// when a generation closes, or at Close.
func (w *Writer) Update(fn func(*Manifest)) error {
	w.acquire(context.Background())
	defer w.release()
	if w.closed {
		return ErrClosed
	}
	m := w.m.Clone()
	fn(&m)
	m.SchemaVersion = w.m.SchemaVersion
	m.RunID = w.m.RunID
	m.Status = w.m.Status
	m.CreatedAt = w.m.CreatedAt
	m.UpdatedAt = w.m.UpdatedAt
	m.TasksFile = w.m.TasksFile
	m.Shards = w.m.Shards
	m.Counts = w.m.Counts
	w.m = m
	return nil
}

// Commit appends one finished episode to the open generation, closing the
// generation afterwards when it is big or old enough. It validates the
// batch first (ErrInvalidBatch; nothing is written) and refuses an episode
// id that is already committed (ErrDuplicate). Callers block while another
// Commit runs or a generation closes; ctx bounds that wait only, never a
// write in progress. The episode is durable once its generation closes.
func (w *Writer) Commit(ctx context.Context, b EpisodeBatch) error {
	id := b.Episode.EpisodeID
	if err := b.Validate(w.runID); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("shard: commit %q: %w", id, err)
	}
	if err := w.acquire(ctx); err != nil {
		return fmt.Errorf("shard: commit %q: %w", id, err)
	}
	defer w.release()
	if w.closed {
		return fmt.Errorf("%w: commit %q", ErrClosed, id)
	}
	if w.broken != nil {
		return fmt.Errorf("%w: commit %q: %v", ErrBroken, id, w.broken)
	}
	if _, open := w.gen.episode(id); w.committed[id] || open {
		return fmt.Errorf("%w: %q", ErrDuplicate, id)
	}
	if w.gen == nil {
		w.gen = &generation{num: w.nextGen, opened: time.Now(), episodes: map[string]string{}, blobs: map[string]bool{}}
		w.nextGen++
	}
	if err := w.append(w.gen, &b); err != nil {
		w.breakWith(err)
		return fmt.Errorf("shard: commit %q: %w (the open generation %d is lost)", id, err, w.gen.num)
	}
	if w.gen.bytes >= w.cfg.RollBytes || time.Since(w.gen.opened) >= w.cfg.RollInterval {
		if err := w.roll(); err != nil {
			return fmt.Errorf("shard: commit %q: %w", id, err)
		}
	}
	return nil
}

// append writes b's rows to g, opening table files on first use.
func (w *Writer) append(g *generation, b *EpisodeBatch) error {
	var err error
	if len(b.Steps) > 0 {
		if g.steps == nil {
			if g.steps, err = createTableFile[schemas.StepRow](w.dir, schemas.TableSteps, g.num, w.runID, w.codec, w.cfg.RowGroupBytes); err != nil {
				return err
			}
		}
		var n int64
		for i := range b.Steps {
			n += b.Steps[i].Size()
		}
		if err := g.steps.write(b.Steps, n); err != nil {
			return err
		}
		g.bytes += n
	}

	if g.episodeF == nil {
		if g.episodeF, err = createTableFile[schemas.EpisodeRow](w.dir, schemas.TableEpisodes, g.num, w.runID, w.codec, w.cfg.RowGroupBytes); err != nil {
			return err
		}
	}
	n := b.Episode.Size()
	if err := g.episodeF.write([]schemas.EpisodeRow{b.Episode}, n); err != nil {
		return err
	}
	g.bytes += n

	if len(b.Rewards) > 0 {
		if g.rewards == nil {
			if g.rewards, err = createTableFile[schemas.RewardRow](w.dir, schemas.TableRewards, g.num, w.runID, w.codec, w.cfg.RowGroupBytes); err != nil {
				return err
			}
		}
		var n int64
		for i := range b.Rewards {
			n += b.Rewards[i].Size()
		}
		if err := g.rewards.write(b.Rewards, n); err != nil {
			return err
		}
		g.bytes += n
	}

	// Blobs are content-addressed: one row per hash per generation.
	blobs := make([]schemas.BlobRow, 0, len(b.Blobs))
	var bn int64
	for i := range b.Blobs {
		if g.blobs[b.Blobs[i].SHA256] {
			continue
		}
		g.blobs[b.Blobs[i].SHA256] = true
		blobs = append(blobs, b.Blobs[i])
		bn += b.Blobs[i].Size()
	}
	if len(blobs) > 0 {
		if g.blobF == nil {
			if g.blobF, err = createTableFile[schemas.BlobRow](w.dir, schemas.TableBlobs, g.num, w.runID, w.codec, w.cfg.RowGroupBytes); err != nil {
				return err
			}
		}
		if err := g.blobF.write(blobs, bn); err != nil {
			return err
		}
		g.bytes += bn
	}
	g.episodes[b.Episode.EpisodeID] = b.Episode.ExitReason
	return nil
}

// breakWith records the first write error and abandons the open generation.
func (w *Writer) breakWith(err error) {
	if w.broken == nil {
		w.broken = err
	}
	if w.gen != nil {
		w.gen.abandon()
	}
}

// Roll closes the open generation now, if it holds any episode, making its
// episodes durable.
func (w *Writer) Roll() error {
	w.acquire(context.Background())
	defer w.release()
	if w.closed {
		return ErrClosed
	}
	if w.broken != nil {
		return fmt.Errorf("%w: %v", ErrBroken, w.broken)
	}
	return w.roll()
}

// roll closes the open generation: finish and rename every table file,
// fsync the table directories, then list the shards in the manifest. Only
// the manifest write makes the generation part of the dataset.
func (w *Writer) roll() error {
	g := w.gen
	if g == nil {
		return nil
	}
	files := g.files()
	infos := make([]ShardInfo, 0, len(files))
	for _, f := range files {
		info, err := f.finish()
		if err != nil {
			w.breakWith(err)
			return err
		}
		infos = append(infos, info)
	}
	for _, info := range infos {
		if err := syncDir(filepath.Join(w.dir, info.Table)); err != nil {
			err = fmt.Errorf("shard: sync %s: %w", info.Table, err)
			w.breakWith(err)
			return err
		}
	}
	m := w.m.withShards()
	m.Shards = append(m.Shards, infos...)
	if m.Counts == nil {
		m.Counts = zeroCounts()
	}
	for _, info := range infos {
		m.Counts[info.Table] += info.Rows
	}
	m.UpdatedAt = time.Now().UTC()
	n, err := writeManifest(w.dir, m, w.side)
	if err != nil {
		w.breakWith(err)
		return err
	}
	m.TasksFile = w.side.current()
	w.m = m
	w.growReserve(n)
	for id, exit := range g.episodes {
		w.committed[id] = true
		w.exits[id] = exit
	}
	w.gen = nil
	if w.onRoll != nil {
		w.onRoll(GenerationClosed{Number: g.num, Episodes: len(g.episodes), Shards: infos})
	}
	return nil
}

// GenerationClosed is a generation made part of the dataset: its number
// and the shards now listed in the manifest.
type GenerationClosed struct {
	Number   int
	Episodes int
	Shards   []ShardInfo
}

// OnGeneration sets fn to be told of every generation that closes (its
// manifest written), for metrics. It is called with the writer's lock held,
// from the goroutine that closed the generation, and must not call the
// Writer. Set it before the first Commit.
func (w *Writer) OnGeneration(fn func(GenerationClosed)) {
	w.acquire(context.Background())
	defer w.release()
	w.onRoll = fn
}

// Close closes the open generation and writes the final manifest with
// status, which must be StatusPartial or StatusComplete. When the Writer
// broke earlier, the open generation is lost, the manifest is written with
// StatusPartial and Close returns the error. Close is idempotent: later
// calls return the first call's result.
func (w *Writer) Close(status Status) error {
	if status != StatusPartial && status != StatusComplete {
		return fmt.Errorf("shard: close: status %q (want %q or %q)", status, StatusPartial, StatusComplete)
	}
	w.stopTicker()
	w.acquire(context.Background())
	defer w.release()
	if w.closed {
		return w.closeErr
	}
	w.closed = true
	var err error
	if w.broken == nil {
		err = w.roll()
	}
	if w.broken != nil {
		if w.gen != nil {
			w.gen.abandon()
		}
		status = StatusPartial
		err = fmt.Errorf("%w: %v", ErrBroken, w.broken)
	}
	w.gen = nil
	w.m.Status = status
	w.m.UpdatedAt = time.Now().UTC()
	// The reserve goes right before the final manifest write: on a full
	// disk, its space is what lets the run be recorded as partial.
	if rerr := unreserve(w.dir); rerr != nil && err == nil {
		err = rerr
	}
	if _, merr := writeManifest(w.dir, w.m, w.side); merr != nil && err == nil {
		err = merr
	}
	w.m.TasksFile = w.side.current()
	if uerr := unlockDir(w.lock); uerr != nil && err == nil {
		err = fmt.Errorf("shard: unlock: %w", uerr)
	}
	w.closeErr = err
	return err
}

func (w *Writer) stopTicker() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.tickDone
}

// tick closes a generation that has grown old while no Commit came.
func (w *Writer) tick() {
	defer close(w.tickDone)
	period := min(w.cfg.RollInterval/4, time.Second)
	period = max(period, time.Millisecond)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		select {
		case w.sem <- struct{}{}:
		case <-w.stop:
			return
		}
		if !w.closed && w.broken == nil && w.gen != nil && time.Since(w.gen.opened) >= w.cfg.RollInterval {
			_ = w.roll() // a failure breaks the Writer; Commit and Close report it
		}
		w.release()
	}
}

// abandon simulates a crash: it stops the ticker and releases the open
// generation's files and the directory lock without finishing anything.
// For tests.
func (w *Writer) abandon() {
	w.stopTicker()
	w.acquire(context.Background())
	defer w.release()
	if w.gen != nil {
		w.gen.abandon()
	}
	w.closed = true
	w.closeErr = ErrClosed
	unlockDir(w.lock)
}
