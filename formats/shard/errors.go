package shard

import "errors"

// Sentinel errors. Errors returned by this package wrap them with details
// (the directory, episode, step and column concerned); test with errors.Is.
var (
	// ErrExists is returned by Create when the directory already holds a
	// dataset (a manifest or shard files). The collector's answer is
	// -resume (Resume) or -force (remove the directory first).
	ErrExists = errors.New("shard: dataset already exists")

	// ErrNoDataset is returned by Open, Resume, Verify and RemoveDataset
	// when the directory holds no manifest (RemoveDataset: or does not
	// exist).
	ErrNoDataset = errors.New("shard: no dataset")

	// ErrDuplicate is returned by Commit for an episode id that is already
	// committed, in a closed generation or in the open one.
	ErrDuplicate = errors.New("shard: episode already committed")

	// ErrInvalidBatch is returned by Commit when a batch breaks a row
	// invariant; the message names the episode, the step and the column.
	// Nothing of the batch is written.
	ErrInvalidBatch = errors.New("shard: invalid episode batch")

	// ErrSchemaVersion is returned by Open, Resume and Verify for a dataset
	// (or a shard) written with a schema version this build does not know.
	ErrSchemaVersion = errors.New("shard: unsupported schema version")

	// ErrCorrupt is returned by Open, Resume and every reader (Episodes,
	// Steps, Rewards, Blobs, Blob, EachEpisode, Drop) when a listed shard
	// is missing, has another size or sha256 than the manifest records,
	// carries other metadata (table, row count, run id), or cannot be
	// decoded; and when the manifest or its tasks sidecar is malformed or
	// does not match its recorded hash. The message names the file.
	// Nothing is returned from a shard before its hash is known good.
	ErrCorrupt = errors.New("shard: dataset corrupt")

	// ErrClosed is returned by a Writer's methods after Close.
	ErrClosed = errors.New("shard: writer closed")

	// ErrBroken is returned by Commit, Roll and Update after a write to the
	// dataset failed; the open generation is lost and the Writer must be
	// closed. Close still writes the manifest of the closed generations.
	ErrBroken = errors.New("shard: writer broken by an earlier error")

	// ErrLocked is returned by Create, Resume and RemoveDataset when a
	// live Writer holds the dataset directory.
	ErrLocked = errors.New("shard: dataset in use by another writer")

	// ErrNotForkline is returned by RemoveDataset when the directory's
	// manifest is not a forkline manifest it may act on: unreadable,
	// undecodable, written by another tool, or of another schema version.
	// Nothing is removed.
	ErrNotForkline = errors.New("shard: not a forkline dataset")

	// ErrForeignFile is returned by RemoveDataset when the dataset
	// directory, or one of its table directories, holds a file or
	// directory a forkline dataset does not have; the message names the
	// first. Nothing is removed.
	ErrForeignFile = errors.New("shard: the dataset directory holds a file forkline did not write")

	// ErrBlobNotFound is returned by Dataset.Blob for an unknown hash.
	ErrBlobNotFound = errors.New("shard: blob not found")
)
