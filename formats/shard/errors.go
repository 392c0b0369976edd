package shard

import "errors"

// Sentinel errors. Errors returned by this package wrap them with details
// (the directory, episode, step and column concerned); test with errors.Is.
var (
	// ErrExists is returned by Create when the directory already holds a
	// dataset (a manifest or shard files). The collector's answer is
	// --resume (Resume) or --force (remove the directory first).
	ErrExists = errors.New("shard: dataset already exists")

	// ErrNoDataset is returned by Open, Resume and Verify when the
	// directory holds no manifest.
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

	// ErrCorrupt is returned by Resume and the readers when a listed shard
	// is missing, has the wrong size, or does not carry the expected
	// metadata.
	ErrCorrupt = errors.New("shard: dataset corrupt")

	// ErrClosed is returned by a Writer's methods after Close.
	ErrClosed = errors.New("shard: writer closed")

	// ErrBroken is returned by Commit, Roll and Update after a write to the
	// dataset failed; the open generation is lost and the Writer must be
	// closed. Close still writes the manifest of the closed generations.
	ErrBroken = errors.New("shard: writer broken by an earlier error")

	// ErrLocked is returned by Create and Resume when another Writer holds
	// the dataset directory.
	ErrLocked = errors.New("shard: dataset in use by another writer")

	// ErrBlobNotFound is returned by Dataset.Blob for an unknown hash.
	ErrBlobNotFound = errors.New("shard: blob not found")
)
