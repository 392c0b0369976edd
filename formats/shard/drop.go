package shard

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/forkline/forkline/schemas"
)

// ExitReasons returns the exit reason of every episode in the closed
// generations, by episode id. The map is a copy. What a reason means is the
// caller's business: the collector redoes "cancelled" ones on resume.
func (w *Writer) ExitReasons() map[string]string {
	w.acquire(context.Background())
	defer w.release()
	return maps.Clone(w.exits)
}

// Drop removes the episodes ids from the dataset, so that they can be
// committed again: a resumed run redoes the episodes a stop cancelled.
// Every closed generation g that holds one of them gets its steps, episodes
// and rewards shards rewritten without them as a new generation (same
// order, same rows otherwise), streaming, one table at a time; g keeps its
// blobs shard, since later episodes may refer to blobs first stored with a
// dropped one, and is left with that shard only (or with nothing). The open
// generation, if any, is closed first. Ids that are not committed are
// ignored. It returns how many episodes were removed.
//
// Crash safety follows the generation protocol: the new shards are
// finished and renamed before one manifest write swaps them for the old
// ones, and the old files are deleted after it. A crash before that write
// leaves new shards the manifest does not list (Resume deletes them); a
// crash after it leaves old ones (likewise). Readers see the dataset before
// or after the drop, never a mix.
func (w *Writer) Drop(ctx context.Context, ids map[string]bool) (int, error) {
	if err := w.acquire(ctx); err != nil {
		return 0, fmt.Errorf("shard: drop: %w", err)
	}
	defer w.release()
	if w.closed {
		return 0, fmt.Errorf("%w: drop", ErrClosed)
	}
	if w.broken != nil {
		return 0, fmt.Errorf("%w: drop: %v", ErrBroken, w.broken)
	}
	if err := w.roll(); err != nil {
		return 0, fmt.Errorf("shard: drop: %w", err)
	}
	// The generations to rewrite, from the episodes shards' id column.
	var gens []int
	for _, s := range w.m.Shards {
		if s.Table != schemas.TableEpisodes {
			continue
		}
		for id, err := range readEpisodeIDs(w.src, s) {
			if err != nil {
				return 0, fmt.Errorf("shard: drop: %w", err)
			}
			if ids[id] {
				gens = append(gens, s.Generation)
				break
			}
		}
	}
	dropped := 0
	for _, g := range gens {
		if err := ctx.Err(); err != nil {
			return dropped, fmt.Errorf("shard: drop: %w", err)
		}
		n, err := w.rewriteWithout(g, ids)
		dropped += n
		if err != nil {
			w.breakWith(err)
			return dropped, fmt.Errorf("shard: drop: %w", err)
		}
	}
	return dropped, nil
}

// rewriteWithout rewrites generation g's episode tables without the
// episodes ids into generation w.nextGen and swaps them in the manifest.
func (w *Writer) rewriteWithout(g int, ids map[string]bool) (int, error) {
	ds := &Dataset{dir: w.dir, m: w.m, src: w.src}
	ng := w.nextGen
	w.nextGen++
	keep := func(id string) bool { return !ids[id] }
	var infos []ShardInfo
	var old []ShardInfo
	var removed []string
	type rewrite func(s ShardInfo) (ShardInfo, int64, error)
	for _, t := range []struct {
		table string
		run   rewrite
	}{
		{schemas.TableSteps, func(s ShardInfo) (ShardInfo, int64, error) {
			return copyShard(w, s, ng, func(r *schemas.StepRow) (bool, int64) { return keep(r.EpisodeID), r.Size() })
		}},
		{schemas.TableEpisodes, func(s ShardInfo) (ShardInfo, int64, error) {
			return copyShard(w, s, ng, func(r *schemas.EpisodeRow) (bool, int64) {
				if !keep(r.EpisodeID) {
					removed = append(removed, r.EpisodeID)
				}
				return keep(r.EpisodeID), r.Size()
			})
		}},
		{schemas.TableRewards, func(s ShardInfo) (ShardInfo, int64, error) {
			return copyShard(w, s, ng, func(r *schemas.RewardRow) (bool, int64) { return keep(r.EpisodeID), r.Size() })
		}},
	} {
		s, ok := ds.shard(t.table, g)
		if !ok {
			continue
		}
		old = append(old, s)
		info, rows, err := t.run(s)
		if err != nil {
			return 0, err
		}
		if rows > 0 {
			infos = append(infos, info)
		}
	}
	for _, table := range []string{schemas.TableSteps, schemas.TableEpisodes, schemas.TableRewards} {
		if err := syncDir(filepath.Join(w.dir, table)); err != nil {
			return 0, fmt.Errorf("sync %s: %w", table, err)
		}
	}
	m := w.m.withShards()
	m.Shards = slices.DeleteFunc(m.Shards, func(s ShardInfo) bool { return slices.Contains(old, s) })
	m.Shards = append(m.Shards, infos...)
	slices.SortStableFunc(m.Shards, compareShards)
	m.Counts = zeroCounts()
	for _, s := range m.Shards {
		m.Counts[s.Table] += s.Rows
	}
	m.UpdatedAt = time.Now().UTC()
	n, err := writeManifest(w.dir, m, w.side)
	if err != nil {
		return 0, err
	}
	m.TasksFile = w.side.current()
	w.m = m
	w.growReserve(n)
	for _, id := range removed {
		delete(w.committed, id)
		delete(w.exits, id)
	}
	// The old shards are no longer part of the dataset; a failure to
	// delete one leaves a file Resume deletes.
	for _, s := range old {
		os.Remove(filepath.Join(w.dir, filepath.FromSlash(s.File)))
	}
	for _, s := range old {
		syncDir(filepath.Join(w.dir, s.Table))
	}
	return len(removed), nil
}

// copyShard streams the rows of shard s that keep accepts into a new shard
// of generation gen, and returns it with its row count. A new shard
// without rows is removed, not finished.
func copyShard[T any](w *Writer, s ShardInfo, gen int, keep func(*T) (bool, int64)) (ShardInfo, int64, error) {
	f, err := createTableFile[T](w.dir, s.Table, gen, w.runID, w.codec, w.cfg.RowGroupBytes)
	if err != nil {
		return ShardInfo{}, 0, err
	}
	var batch []T
	var bytes int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := f.write(batch, bytes)
		batch, bytes = batch[:0], 0
		return err
	}
	for row, err := range readShard[T](w.src, s, readBatchRows) {
		if err != nil {
			f.abandon()
			return ShardInfo{}, 0, err
		}
		ok, n := keep(&row)
		if !ok {
			continue
		}
		batch = append(batch, row)
		bytes += n
		if len(batch) == readBatchRows {
			if err := flush(); err != nil {
				f.abandon()
				return ShardInfo{}, 0, err
			}
		}
	}
	if err := flush(); err != nil {
		f.abandon()
		return ShardInfo{}, 0, err
	}
	if f.rows == 0 {
		f.abandon()
		os.Remove(filepath.Join(f.dir, tmpName(gen)))
		return ShardInfo{}, 0, nil
	}
	info, err := f.finish()
	return info, info.Rows, err
}
