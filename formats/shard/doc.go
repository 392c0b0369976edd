// Package shard owns forkline's native dataset on disk: writing finished
// episodes into Parquet shards with a manifest, reading them back, resuming
// a crashed run and verifying a dataset.
//
// It knows the dataset layout and the row types of package schemas. It does
// not know how rows are produced (capture, the collector), what a task or a
// reward means, or what trainers want (formats/verl, formats/hf,
// formats/chat). The manifest's Provider, Policy, Capture, Tasks, Plan and
// Summary fields are opaque JSON that the collector owns.
//
// # Layout
//
//	run/
//	  manifest.json
//	  steps/part-00000.parquet     episodes/part-00000.parquet
//	  rewards/part-00000.parquet   blobs/part-00000.parquet
//
// Every shard carries the key/value metadata schemas.MetaSchemaVersion,
// schemas.MetaTable and schemas.MetaRunID and is zstd-compressed by default.
//
// # Episode-atomic generations
//
// A Writer has at most one open generation g. Commit appends one finished
// episode (its episode row, all its steps, its rewards and its blobs) to the
// open generation's per-table Parquet writers, which write to hidden
// temporary files ("steps/.part-NNNNN.parquet.tmp"). The generation closes
// when its rows reach Config.RollBytes (estimated uncompressed size), when it
// is Config.RollInterval old (checked on every Commit and by a background
// ticker), on Roll and on Close. Closing a generation finishes every table's
// file of that generation (footer, fsync), renames it to part-NNNNN.parquet
// (the same NNNNN = g in every table; a table without rows in g gets no
// file), fsyncs the directories, and then rewrites manifest.json atomically
// (temporary file, fsync, rename, fsync) listing each shard with its
// generation, row count, byte size and sha256. The hash and size are taken
// while the file is written, never by reading it back.
//
// The invariant, which Verify checks: an episode is in the dataset if and
// only if its episode row is in a shard listed in the manifest, and then all
// its steps and rewards are in the listed shards of the same generation.
// The blobs its steps refer to are in that generation or an earlier one:
// blobs are content-addressed, the writer stores a hash once per generation,
// and a collector that deduplicates across the run sends each blob only with
// the first episode that needs it (generations close in order, so that
// blob is durable no later than the episode). Within a generation the steps
// and rewards appear in the same episode order as the episodes shard, steps
// in step order; EachEpisode relies on it.
//
// Commit returning nil means the episode is in the open generation, not yet
// durable; it becomes durable when its generation closes. A crash (or a
// failed write, after which the Writer refuses further commits) therefore
// loses at most the open generation, and readers never see part of an
// episode: they read listed shards only.
//
// A generation may also hold a blobs shard and nothing else: what Drop
// leaves when it moves a generation's episodes (see below).
//
// # Resume
//
// Resume reopens a run after a crash or a stop: it removes leftover
// temporary files and any part-*.parquet file the manifest does not list
// (the remains of a generation that was closing when the crash hit), checks
// that every listed shard exists with its recorded size, reads the episode
// ids of the listed episode shards (Committed, so the collector can skip
// finished episodes; episode ids are deterministic), continues the
// generation numbering and sets the status back to running.
//
// ExitReasons tells the collector how each committed episode ended, and
// Drop removes episodes so that they can be committed again (a resumed run
// redoes the cancelled ones): each closed generation holding one is
// rewritten, without them, as a new generation, by the same protocol (new
// shards renamed, then one manifest write, then the old shards deleted);
// the old generation keeps its blobs shard, which later episodes may use.
//
// # Memory and concurrency
//
// Parquet row groups are flushed when a table's buffered rows exceed
// Config.RowGroupBytes, so a writer holds about four row groups at most and
// never a whole shard. Readers stream shard by shard with a fixed-size row
// buffer; EachEpisode holds one episode at a time.
//
// A Writer is safe for concurrent use. Commit serialises callers, who block
// while a generation closes: that is the back-pressure. A Writer holds an
// exclusive advisory lock on the dataset directory (on Unix), so two writers
// cannot interleave one run. A Dataset is safe for concurrent use; each
// iterator opens its own files.
package shard
