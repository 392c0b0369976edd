package shard

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/forkline/forkline/schemas"
)

// Report is what Verify found.
type Report struct {
	Status      Status
	Generations int
	Shards      int
	Bytes       int64
	Rows        map[string]int64 // rows per table, from the shards' footers
	Problems    []string         // anything that breaks the dataset's guarantees
	// Unlisted are forkline's files that are not part of the dataset:
	// leftovers of a generation lost in a crash (unlisted shards,
	// temporary files) and unreferenced tasks sidecars. Readers ignore
	// them and Resume deletes them; they are not problems. (The manifest
	// reserve of a live or crashed Writer, ReserveFile, is neither
	// reported nor a problem.)
	Unlisted []string
	// Foreign are files in the dataset directory or its table directories
	// that a forkline dataset does not have. Readers ignore them; they are
	// not problems, but RemoveDataset refuses to delete a dataset that
	// holds any.
	Foreign []string
	// Manifest is the manifest checked, for callers that check its
	// entries too (the provider, policy, plan and summary records, which
	// this package stores as given: see package manifest).
	Manifest Manifest
}

// OK reports whether Verify found no problem.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Verify checks the dataset in dir against its manifest, everything that
// readers rely on, and reports every problem it finds rather than the first:
//
//   - the manifest: written by forkline; a tasks sidecar it names exists
//     with its recorded size and sha256;
//   - every listed shard: its entry is well-formed and listed once; the
//     file exists with its size and sha256 (re-hashed); its footer's row
//     count, schema version, table and run id match;
//   - the counts: the rows of the listed shards add up to the manifest's
//     per-table counts;
//   - the generation invariant: every generation has an episodes shard
//     (or only a blobs shard), episode ids are unique across the dataset,
//     every episode row carries the manifest's run id, every step and
//     reward row belongs to an episode of its own generation, and each
//     episode's steps count equals its step rows;
//   - the outcomes: no episode is kept as done while its verifier errored
//     (its session failed, or a stop cut it short: the reward row of the
//     episode holds no value and the error, see verifierErrored); its
//     reward is missing, not the task's outcome, and a resume would not
//     run it again;
//   - the lineage: every branch episode's parent is in the dataset, the
//     branch starts where its branched parent ends (or after one of the own
//     steps of a parent that went on past its checkpoint), and no episode
//     is its own ancestor.
//
// The error is for a dataset that cannot be checked at all (no manifest,
// an undecodable manifest, an unknown schema version, a manifest whose own
// bookkeeping does not hold together: ErrCorrupt); everything else is a
// Problem in the Report.
func Verify(dir string) (Report, error) {
	name := filepath.Join(dir, ManifestFile)
	data, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return Report{}, fmt.Errorf("%w: %s has no %s", ErrNoDataset, dir, ManifestFile)
	}
	if err != nil {
		return Report{}, fmt.Errorf("shard: read manifest: %w", err)
	}
	m, err := decodeManifest(name, data)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Status: m.Status, Rows: zeroCounts(), Manifest: m.Clone()}
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
	}
	if m.Tool != ToolName {
		problem("%s: tool is %q, not %q", name, m.Tool, ToolName)
	}
	if m.TasksFile != nil {
		if _, err := readSidecar(dir, *m.TasksFile); err != nil {
			problem("%v", err)
		}
	}

	src := newSource(dir, m.RunID)
	listed := map[string]bool{}
	failed := map[string]bool{} // listed shards that failed their checks
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
		if err := src.check(s); err != nil {
			problem("%v", err)
			failed[s.File] = true
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
	for t := range m.Counts {
		if _, err := schemas.RowType(t); err != nil {
			problem("the manifest counts rows of an unknown table %q", t)
		}
	}
	rep.Generations = len(m.Generations())

	ds := &Dataset{dir: dir, m: m, src: src}
	ds.m.Shards = good
	seen := map[string]int{} // episode id → generation
	for _, gen := range m.Generations() {
		verifyGeneration(ds, m, gen, failed, seen, problem)
	}
	if len(failed) == 0 {
		if _, err := ds.readLineage(); err != nil {
			problem("%v", err)
		}
	}

	entries, err := scanDataset(dir, &m)
	if err != nil {
		problem("%v", err)
	}
	for _, e := range entries {
		switch e.kind {
		case kindLeftover:
			rep.Unlisted = append(rep.Unlisted, e.rel)
		case kindForeign:
			rep.Foreign = append(rep.Foreign, e.rel)
		}
	}
	return rep, nil
}

// episodeCheck is the part of an episode row Verify reads.
type episodeCheck struct {
	EpisodeID  string `parquet:"episode_id"`
	RunID      string `parquet:"run_id"`
	Steps      int32  `parquet:"steps"`
	ExitReason string `parquet:"exit_reason"`
}

// rewardCheck is the part of a reward row Verify reads.
type rewardCheck struct {
	EpisodeID string   `parquet:"episode_id"`
	StepIndex *int32   `parquet:"step_index,optional"`
	Name      string   `parquet:"name"`
	Value     *float64 `parquet:"value,optional"`
	Detail    string   `parquet:"detail"`
}

// verifierReward is the name of an episode's verifier reward row
// (task.RewardName, which this package does not import).
const verifierReward = "verify"

// verifierErrored reports whether r is an episode's verifier reward row
// that holds an error rather than the verifier's outcome: no value, and the
// detail is the error of the verifier's session or of a stop that cut it
// short, as the episode runner records it (the task and episode packages'
// "verify:" errors). A verifier that ran and gave no value (a timeout, no
// number, no reward file) is the task's outcome, with its own detail.
func verifierErrored(r rewardCheck) bool {
	return r.Name == verifierReward && r.StepIndex == nil && r.Value == nil &&
		(strings.HasPrefix(r.Detail, "task: verify: ") || strings.HasPrefix(r.Detail, "episode: verify: "))
}

// verifyGeneration checks the generation invariant of one generation over
// the shards that passed their own checks (ds lists only those; failed
// names the others, already reported, so that their absence is not
// reported again). It holds the generation's episode ids and step counts,
// never rows.
func verifyGeneration(ds *Dataset, m Manifest, gen int, failed map[string]bool, seen map[string]int, problem func(string, ...any)) {
	isFailed := func(table string) bool { return failed[path.Join(table, shardName(gen))] }
	eps, ok := ds.shard(schemas.TableEpisodes, gen)
	if !ok {
		// Judged on every listed shard, the failed ones included.
		if all := (&Dataset{m: m}); !isFailed(schemas.TableEpisodes) && !all.blobsOnly(gen) {
			problem("generation %d has shards but no episodes shard", gen)
		}
		return
	}
	steps := map[string]int32{} // episode id → its steps column
	done := map[string]bool{}   // episodes kept as done
	for ep, err := range readShard[episodeCheck](ds.src, eps, readBatchKeys) {
		if err != nil {
			problem("%v", err)
			return
		}
		if g, dup := seen[ep.EpisodeID]; dup {
			problem("episode %q is in generation %d and again in generation %d", ep.EpisodeID, g, gen)
		}
		seen[ep.EpisodeID] = gen
		steps[ep.EpisodeID] = ep.Steps
		if ep.ExitReason == "done" { // runtime.ExitDone
			done[ep.EpisodeID] = true
		}
		if ep.RunID != ds.m.RunID {
			problem("%s: episode %q has run_id %q, the manifest's is %q", eps.File, ep.EpisodeID, ep.RunID, ds.m.RunID)
		}
	}
	for _, table := range []string{schemas.TableSteps, schemas.TableRewards} {
		s, ok := ds.shard(table, gen)
		if !ok {
			continue
		}
		orphans := 0
		first := ""
		rows := map[string]int32{}
		ids := readEpisodeIDs(ds.src, s)
		if table == schemas.TableRewards {
			ids = func(yield func(string, error) bool) {
				for r, err := range readShard[rewardCheck](ds.src, s, readBatchKeys) {
					if err == nil && done[r.EpisodeID] && verifierErrored(r) {
						detail, _, _ := strings.Cut(r.Detail, "\n")
						if len(detail) > 300 {
							detail = detail[:300] + "..."
						}
						problem("%s: episode %q is kept as done, but its verifier errored (%s): its reward is missing, not the task's outcome, and a resume would not run it again", s.File, r.EpisodeID, detail)
					}
					if !yield(r.EpisodeID, err) || err != nil {
						return
					}
				}
			}
		}
		for id, err := range ids {
			if err != nil {
				problem("%v", err)
				break
			}
			if _, ok := steps[id]; !ok {
				if orphans == 0 {
					first = id
				}
				orphans++
			}
			rows[id]++
		}
		if orphans > 0 {
			problem("%s: %d rows belong to no episode of generation %d (first: %q)", s.File, orphans, gen, first)
		}
		if table == schemas.TableSteps {
			for id, n := range steps {
				if rows[id] != n {
					problem("generation %d: episode %q has steps = %d but %s holds %d of its step rows", gen, id, n, s.File, rows[id])
				}
			}
		}
	}
	if _, ok := ds.shard(schemas.TableSteps, gen); !ok && !isFailed(schemas.TableSteps) {
		for id, n := range steps {
			if n != 0 {
				problem("generation %d: episode %q has steps = %d but the generation has no steps shard", gen, id, n)
			}
		}
	}
}
