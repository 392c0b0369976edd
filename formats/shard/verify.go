package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/forkline/forkline/schemas"
	"github.com/parquet-go/parquet-go"
)

// Report is what Verify found.
type Report struct {
	Status      Status
	Generations int
	Shards      int
	Bytes       int64
	Rows        map[string]int64 // rows per table, from the shards' footers
	Problems    []string         // anything that breaks the dataset's guarantees
	// Unlisted are files in the table directories that the manifest does
	// not list: leftovers of a generation lost in a crash. Readers ignore
	// them and Resume deletes them; they are not problems.
	Unlisted []string
}

// OK reports whether Verify found no problem.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Verify checks the dataset in dir against its manifest: every listed shard
// exists with its size and sha256 (re-hashed), its footer's row count and
// forkline metadata (schema version, table, run id) match, the per-table
// counts add up, and the generation invariant holds: every generation has
// an episodes shard, episode ids are unique, and every step and reward row
// belongs to an episode of its own generation. The error is for a dataset
// that cannot be checked at all (no manifest, unknown schema version, a
// manifest whose own bookkeeping does not hold together: ErrCorrupt);
// everything else is a Problem in the Report.
func Verify(dir string) (Report, error) {
	m, err := readManifest(dir)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Status: m.Status, Rows: zeroCounts()}
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
	}
	listed := map[string]bool{}
	good := []ShardInfo{}
	for _, s := range m.Shards {
		if err := checkShardEntry(s); err != nil {
			problem("%v", err)
			continue
		}
		if listed[s.File] {
			problem("%s is listed twice", s.File)
			continue
		}
		listed[s.File] = true
		rep.Shards++
		rep.Bytes += s.Bytes
		if err := verifyShard(dir, m.RunID, s); err != nil {
			problem("%v", err)
			continue
		}
		rep.Rows[s.Table] += s.Rows
		good = append(good, s)
	}
	for _, t := range schemas.Tables {
		if rep.Rows[t] != m.Counts[t] {
			problem("table %s: the shards hold %d rows, the manifest counts %d", t, rep.Rows[t], m.Counts[t])
		}
	}
	rep.Generations = len(m.Generations())

	// The generation invariant.
	ds := &Dataset{dir: dir, m: m}
	ds.m.Shards = good
	seen := map[string]int{} // episode id → generation
	for _, gen := range m.Generations() {
		eps, ok := ds.shard(schemas.TableEpisodes, gen)
		if !ok {
			if !ds.blobsOnly(gen) {
				problem("generation %d has shards but no episodes shard", gen)
			}
			continue
		}
		ids := map[string]bool{}
		for id, err := range readEpisodeIDs(dir, eps) {
			if err != nil {
				problem("%v", err)
				break
			}
			if g, dup := seen[id]; dup {
				problem("episode %q is in generation %d and again in generation %d", id, g, gen)
			}
			seen[id] = gen
			ids[id] = true
		}
		for _, table := range []string{schemas.TableSteps, schemas.TableRewards} {
			s, ok := ds.shard(table, gen)
			if !ok {
				continue
			}
			orphans := 0
			first := ""
			for id, err := range readEpisodeIDs(dir, s) {
				if err != nil {
					problem("%v", err)
					break
				}
				if !ids[id] {
					if orphans == 0 {
						first = id
					}
					orphans++
				}
			}
			if orphans > 0 {
				problem("%s: %d rows belong to no episode of generation %d (first: %q)", s.File, orphans, gen, first)
			}
		}
	}

	for _, table := range schemas.Tables {
		entries, err := os.ReadDir(filepath.Join(dir, table))
		if err != nil {
			if !os.IsNotExist(err) {
				problem("%v", err)
			}
			continue
		}
		for _, e := range entries {
			if rel := table + "/" + e.Name(); !listed[rel] {
				rep.Unlisted = append(rep.Unlisted, rel)
			}
		}
	}
	return rep, nil
}

// verifyShard re-hashes a shard and checks its footer against its entry.
func verifyShard(dir, runID string, s ShardInfo) error {
	f, err := os.Open(filepath.Join(dir, filepath.FromSlash(s.File)))
	if err != nil {
		return fmt.Errorf("listed shard %s: %w", s.File, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("%s: %w", s.File, err)
	}
	if n != s.Bytes {
		return fmt.Errorf("%s has %d bytes, the manifest says %d", s.File, n, s.Bytes)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != s.SHA256 {
		return fmt.Errorf("%s has sha256 %s, the manifest says %s", s.File, sum, s.SHA256)
	}
	pf, err := parquet.OpenFile(f, n)
	if err != nil {
		return fmt.Errorf("%s: %w", s.File, err)
	}
	if err := checkShardMeta(pf, s); err != nil {
		return err
	}
	if id, _ := pf.Lookup(schemas.MetaRunID); id != runID {
		return fmt.Errorf("%s has %s = %q, the manifest says %q", s.File, schemas.MetaRunID, id, runID)
	}
	return nil
}
