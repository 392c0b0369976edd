package ui

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/manifest"
)

// WriteSummary writes inspect's summary of a dataset, one section per
// aspect, as forkline inspect prints it. A dataset with problems gets its
// problems and files and no row sections: its readers refuse it.
func WriteSummary(w io.Writer, s *inspect.Summary) {
	writeRunHeader(w, s)
	writeRunSetup(w, s)
	if len(s.Problems) > 0 {
		fmt.Fprintf(w, "\nproblems: %d (the dataset does not match its manifest; its readers refuse it)\n", len(s.Problems))
		for _, p := range s.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
		writeFiles(w, s)
		return
	}
	writeFiles(w, s)
	writeEpisodes(w, s)
	writeReward(w, s)
	writeResetLatency(w, s)
	writeTokens(w, s)
	writeBytes(w, s)
}

// writeRunHeader is the dataset's directory, status and plan.
func writeRunHeader(w io.Writer, s *inspect.Summary) {
	fmt.Fprintf(w, "forkline inspect: %s\n", s.Dir)
	fmt.Fprintf(w, "  status    %s (run %s; %s, dataset schema %d; created %s, updated %s)\n", s.Status, s.RunID,
		strings.TrimSpace(s.Tool+" "+s.ToolVersion), s.SchemaVersion, s.CreatedAt.UTC().Format(time.RFC3339), s.UpdatedAt.UTC().Format(time.RFC3339))
	p := s.Plan
	if p == nil {
		return
	}
	part := ""
	if p.Part.Count > 1 {
		part = fmt.Sprintf(", part %s of %d episodes in all", p.Part, p.Total)
	}
	branch := ""
	if p.Branch != "" {
		branch = "; roots branched by -branch " + p.Branch
	}
	fmt.Fprintf(w, "  plan      %s (%s × %s%s), seed %d; %s, reset %s%s\n",
		plural(p.Episodes, "episode"), plural(len(s.Tasks), "task"), plural(p.Repeats, "repeat"), part, p.Seed, plural(p.Replicas, "replica"), p.Reset, branch)
}

// writeRunSetup is the provider, the policy (with its conversation) and
// the capture policy the run recorded.
func writeRunSetup(w io.Writer, s *inspect.Summary) {
	if p := s.Provider; p != nil {
		extra := ""
		if p.Image != "" {
			extra = ", every task's image " + p.Image
		}
		fmt.Fprintf(w, "  provider  %s%s%s\n", p.Name, settings(p.Params), extra)
	}
	if p := s.Policy; p != nil {
		extra := ""
		if p.ScriptFile != "" {
			extra += ", script " + p.ScriptFile
		}
		if p.Source != "" {
			extra += ", replayed from " + p.Source
		}
		fmt.Fprintf(w, "  policy    %s%s%s\n", p.Name, settings(p.Options), extra)
		if p.Conversation != nil {
			writeWrappedList(w, "            conversation: ", conversationSettings(*p.Conversation))
		}
	}
	if len(s.Capture) > 0 {
		var parts []string
		for _, k := range sortedKeys(s.Capture) {
			parts = append(parts, k+" "+s.Capture[k])
		}
		fmt.Fprintf(w, "  capture   %s\n", strings.Join(parts, ", "))
	}
}

// writeFiles lists leftovers and foreign files, which are not problems, and
// says the dataset verified when it has no problems.
func writeFiles(w io.Writer, s *inspect.Summary) {
	if len(s.Unlisted) > 0 {
		fmt.Fprintf(w, "  leftovers (not part of the dataset; a resume deletes them): %s\n", strings.Join(s.Unlisted, ", "))
	}
	if len(s.Foreign) > 0 {
		fmt.Fprintf(w, "  foreign files (not forkline's; readers ignore them): %s\n", strings.Join(s.Foreign, ", "))
	}
	if len(s.Problems) == 0 {
		fmt.Fprintf(w, "  verify    ok: every listed shard matches its size, sha256 and rows\n")
	}
}

// writeEpisodes is the episodes by task and exit reason, and the first
// episode of each exit reason per task.
func writeEpisodes(w io.Writer, s *inspect.Summary) {
	fmt.Fprintf(w, "\nepisodes: %d, %d steps; scaffold losses: %d\n", s.Episodes, s.Steps, s.Losses)
	if s.Episodes == 0 {
		return
	}
	fmt.Fprintf(w, "  %-24s %8s %7s  %-12s %s\n", "task", "episodes", "steps", "reward mean", "exit reasons")
	for _, t := range s.Tasks {
		fmt.Fprintf(w, "  %-24s %8d %7d  %-12s %s\n", t.ID, t.Episodes, t.Steps, fmtMean(t.RewardMean), exits(t.ByExit))
	}
	if len(s.Tasks) > 1 {
		fmt.Fprintf(w, "  %-24s %8d %7d  %-12s %s\n", "(all)", s.Episodes, s.Steps, fmtMean(s.Reward.Mean), exits(s.ByExit))
	}
	if s.Losses > 0 {
		fmt.Fprintf(w, "  (* scaffold loss: the episode says nothing about the task)\n")
	}
	fmt.Fprintf(w, "  first episode of each (inspect DIR -episode ID shows it):\n")
	for _, t := range s.Tasks {
		var parts []string
		for _, e := range orderedExits(t.FirstByExit) {
			parts = append(parts, e+" "+t.FirstByExit[e])
		}
		if len(parts) > 0 {
			writeWrappedList(w, fmt.Sprintf("    %-22s ", t.ID), parts)
		}
	}
}

// writeReward is the distribution of the reward the summary was asked
// for (distinct values or a histogram, with bars) and the other rewards'
// counts.
func writeReward(w io.Writer, s *inspect.Summary) {
	r := s.Reward
	fmt.Fprintf(w, "\nreward %q (episode level): ", r.Name)
	if r.Count == 0 {
		fmt.Fprintf(w, "none")
	} else {
		fmt.Fprintf(w, "%d values, mean %s, min %s, max %s", r.Count, num(*r.Mean), num(*r.Min), num(*r.Max))
	}
	if r.Null > 0 {
		fmt.Fprintf(w, "; %d verifications gave no value", r.Null)
	}
	fmt.Fprintln(w)
	if r.Count > 0 {
		most := 0
		for _, v := range r.Values {
			most = max(most, v.Count)
		}
		for _, b := range r.Histogram {
			most = max(most, b.Count)
		}
		for _, v := range r.Values {
			fmt.Fprintf(w, "  %-22s %6d  %s\n", num(v.Value), v.Count, bar(v.Count, most))
		}
		for i, b := range r.Histogram {
			closing := ")"
			if i == len(r.Histogram)-1 {
				closing = "]"
			}
			fmt.Fprintf(w, "  %-22s %6d  %s\n", "["+num(b.Low)+", "+num(b.High)+closing, b.Count, bar(b.Count, most))
		}
	}
	for _, o := range s.OtherRewards {
		fmt.Fprintf(w, "  other reward %q: %d episode-level, %d step-level rows\n", o.Name, o.EpisodeLevel, o.StepLevel)
	}
}

// writeResetLatency is reset latency by strategy and fork method, and the
// golden builds' times.
func writeResetLatency(w io.Writer, s *inspect.Summary) {
	if len(s.Reset) == 0 && len(s.GoldenBuild) == 0 {
		return
	}
	fmt.Fprintf(w, "\nreset latency (ms, by strategy/fork method):\n")
	for _, l := range s.Reset {
		sample := ""
		if !l.Exact {
			sample = fmt.Sprintf(" (from a sample of %d)", manifest.SampleSize)
		}
		fmt.Fprintf(w, "  %-20s p50 %10.3f   p95 %10.3f   n=%d%s\n", l.Key, l.P50, l.P95, l.N, sample)
	}
	if len(s.GoldenBuild) > 0 {
		var parts []string
		for _, k := range sortedKeys(s.GoldenBuild) {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, s.GoldenBuild[k]))
		}
		writeWrappedList(w, "  golden builds (ms): ", parts)
	}
}

// writeTokens is the token records' coverage, drift and cuts, and the
// sources the model turns' ids came from.
func writeTokens(w io.Writer, s *inspect.Summary) {
	fmt.Fprintf(w, "\ntokens: %d of %d episodes have a token record (%d model turns); %d flagged with token drift",
		s.Tokens.WithRecord, s.Episodes, s.Tokens.Turns, s.Tokens.Drift)
	if len(s.Tokens.Cut) > 0 {
		var parts []string
		for _, k := range sortedKeys(s.Tokens.Cut) {
			parts = append(parts, fmt.Sprintf("%s %d", k, s.Tokens.Cut[k]))
		}
		fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
	if len(s.Tokens.Sources) == 0 {
		return
	}
	fmt.Fprintf(w, "  model turns by token source (path, endpoints, model, chat template):\n")
	for _, src := range s.Tokens.Sources {
		tmpl := ""
		if src.TemplateSHA256 != "" {
			tmpl = "  template " + src.TemplateSHA256[:min(12, len(src.TemplateSHA256))]
		}
		fmt.Fprintf(w, "    %-5s %-44s %-24s %s%s\n", orNone(src.Path, "-"), orNone(src.Endpoints, "-"), src.Model, plural(src.Turns, "turn"), tmpl)
	}
	if s.Tokens.MixedSources() {
		fmt.Fprintf(w, "  this dataset mixes %d token sources: its records come from different servers, templates or token paths\n", len(s.Tokens.Sources))
	}
}

// writeBytes is the bytes on disk by table, in all and per step.
func writeBytes(w io.Writer, s *inspect.Summary) {
	fmt.Fprintf(w, "\nbytes on disk (zstd Parquet):\n")
	for _, t := range s.Bytes.Tables {
		per := ""
		if t.Rows > 0 {
			per = fmt.Sprintf("  %s per row", thousands(int64(float64(t.Bytes)/float64(t.Rows)+0.5)))
		}
		fmt.Fprintf(w, "  %-9s %-9s %14s bytes %10s rows%s\n", t.Table, plural(t.Shards, "shard"), thousands(t.Bytes), thousands(t.Rows), per)
	}
	fmt.Fprintf(w, "  %-9s %-9s %14s bytes", "total", "", thousands(s.Bytes.Total))
	if s.Steps > 0 {
		fmt.Fprintf(w, "; per step %s (steps table alone %s)", thousands(int64(s.Bytes.PerStep+0.5)), thousands(int64(s.Bytes.StepsPerStep+0.5)))
	}
	fmt.Fprintln(w)
}
