// Package shard owns forkline's native dataset on disk: writing finished
// episodes into Parquet shards with a manifest, reading them back, resuming
// a crashed run and verifying a dataset.
//
// It knows the dataset layout and the row types of package schemas. It does
// not know how rows are produced (capture, the collector), what a task or a
// reward means, or what trainers want (formats/verl, formats/hf,
// formats/chat). The manifest's Provider, Policy, Capture, Tasks, Plan and
// Summary fields are opaque JSON that their producers own (the Policy entry
// is a policy.Record).
//
// # Layout
//
//	run/
//	  manifest.json
//	  tasks-<sha256>.json          (only when the task specs exceed TasksInlineMax)
//	  manifest.json.reserve        (only while a Writer has the run open, or crashed)
//	  steps/part-00000.parquet     episodes/part-00000.parquet
//	  rewards/part-00000.parquet   blobs/part-00000.parquet
//
// Every shard carries the key/value metadata schemas.MetaSchemaVersion,
// schemas.MetaTable and schemas.MetaRunID and is zstd-compressed by default.
//
// Task specs longer than TasksInlineMax (64 KiB of JSON) are stored once,
// in a content-addressed sidecar written atomically when the manifest first
// needs it; the manifest's tasks_file names it with its size and sha256,
// and readers load and check it, so Manifest.Tasks reads the same for
// every caller. Without it a 48 MB task suite was rewritten with the
// manifest at every generation close.
//
// ReserveFile is space held for the final manifest write: a run that fills
// its disk still closes as partial (see ReserveFile).
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
// # Integrity
//
// Every reader (Open's Dataset with Episodes, Steps, Rewards, Blobs, Blob
// and EachEpisode; Resume; Drop; Verify) checks a shard against its
// manifest entry before it decodes a row of it: the file's size, its
// sha256 over the whole file, then the footer's row count, table, schema
// version and run id (which catches a run_id edited in the manifest). A
// mismatch is ErrCorrupt naming the file. Nothing read from a damaged shard
// is ever handed out.
//
// Decision: the file is hashed in one sequential pass right before it is
// decoded, on the descriptor the decoder then reads, rather than while the
// Parquet reader pulls bytes. The reader reads the footer first and then
// only the column chunks a projection needs, out of file order, so a hash
// of the bytes it pulls would cover part of the file and be known only
// after rows were out. The pass costs a second read of the file, mostly
// from the page cache; sha256 runs an order of magnitude faster than
// Parquet decoding, so it adds a few percent to a read (BenchmarkHashShard
// against BenchmarkEachEpisode).
// A Dataset (and a Writer) remembers the shards it hashed, so that a file
// opened again (Blob opens the blobs shard for every lookup) is hashed
// once while it stays the same file (same inode, size and modification
// time). A listed shard is never rewritten by forkline, so a change between
// the hash and the decode can only come from outside, and is not guarded.
//
// parquet-go trusts the pages it decodes, and a damaged page can make it
// panic (an index out of range, a slice from a nil pointer). The hash
// catches damage first; a panic while decoding is still recovered and
// reported as ErrCorrupt naming the file, for a shard listed with a wrong
// hash by hand.
//
// # Resume
//
// Resume reopens a run after a crash or a stop. First, without changing
// anything, it checks every listed shard as readers do (size, sha256,
// footer, run id) and reads the episode ids of the listed episode shards
// (Committed, so the collector can skip finished episodes; episode ids are
// deterministic); a refused Resume leaves every byte as it was. Then it
// removes leftover temporary files, any part-*.parquet file the manifest
// does not list (the remains of a generation that was closing when the
// crash hit) and unreferenced tasks sidecars, continues the generation
// numbering and sets the status back to running.
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
// exclusive advisory lock (flock) on the dataset directory itself (on
// Unix; there is no lock file), so two writers cannot interleave one run.
// A Dataset is safe for concurrent use; each iterator opens its own files.
//
// # Removing a dataset
//
// RemoveDataset is what a -force uses: it takes the same lock without
// waiting (a live Writer makes it fail with ErrLocked, and no Writer can
// start while it removes) and deletes only the files a forkline dataset
// has, refusing, with nothing changed, a directory holding anything else or
// a manifest that is not forkline's.
package shard
