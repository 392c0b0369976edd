package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

// WriteText writes the summary for a reader: one section per aspect.
func (s *Summary) WriteText(w io.Writer) {
	fmt.Fprintf(w, "forkline inspect: %s\n", s.Dir)
	fmt.Fprintf(w, "  status    %s (run %s; %s, dataset schema %d; created %s, updated %s)\n", s.Status, s.RunID,
		strings.TrimSpace(s.Tool+" "+s.ToolVersion), s.SchemaVersion, s.CreatedAt.UTC().Format(time.RFC3339), s.UpdatedAt.UTC().Format(time.RFC3339))
	if p := s.Plan; p != nil {
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
	if len(s.Problems) > 0 {
		fmt.Fprintf(w, "\nproblems: %d (the dataset does not match its manifest; its readers refuse it)\n", len(s.Problems))
		for _, p := range s.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
		s.writeFiles(w)
		return
	}
	s.writeFiles(w)

	fmt.Fprintf(w, "\nepisodes: %d, %d steps; scaffold losses: %d\n", s.Episodes, s.Steps, s.Losses)
	if s.Episodes > 0 {
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

	if len(s.Reset) > 0 || len(s.GoldenBuild) > 0 {
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
	if len(s.Tokens.Sources) > 0 {
		fmt.Fprintf(w, "  model turns by token source (path, endpoints, model, chat template):\n")
		for _, src := range s.Tokens.Sources {
			path, ends, tmpl := src.Path, src.Endpoints, ""
			if path == "" {
				path = "-"
			}
			if ends == "" {
				ends = "-"
			}
			if src.TemplateSHA256 != "" {
				tmpl = "  template " + src.TemplateSHA256[:min(12, len(src.TemplateSHA256))]
			}
			fmt.Fprintf(w, "    %-5s %-44s %-24s %s%s\n", path, ends, src.Model, plural(src.Turns, "turn"), tmpl)
		}
		if s.Tokens.MixedSources() {
			fmt.Fprintf(w, "  this dataset mixes %d token sources: its records come from different servers, templates or token paths\n", len(s.Tokens.Sources))
		}
	}

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

// writeFiles lists leftovers and foreign files, which are not problems.
func (s *Summary) writeFiles(w io.Writer) {
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

// WriteText writes the transcript for a reader.
func (t *Transcript) WriteText(w io.Writer) {
	fmt.Fprintf(w, "episode %s  task %s  repeat %d  (run %s)\n", t.EpisodeID, t.TaskID, t.Repeat, t.RunID)
	fmt.Fprintf(w, "  %s after %d steps in %.0f ms; %s, replica %d, reset %s %.3f ms", t.ExitReason, len(t.Steps), t.DurationMS,
		t.Provider, t.Replica, t.Reset, t.ResetMS)
	if t.TokenRecord {
		fmt.Fprintf(w, "; token record")
		if t.TokenDrift {
			fmt.Fprintf(w, " (cut at a token drift)")
		}
	}
	fmt.Fprintln(w)
	if t.Detail != "" {
		writeBlock(w, "  detail: ", t.Detail)
	}
	if t.System != "" {
		fmt.Fprintf(w, "\n[system]\n")
		writeBlock(w, "  ", t.System)
	}
	fmt.Fprintf(w, "\n[user: the task's instruction]\n")
	writeBlock(w, "  ", orNone(t.Instruction, "(not recorded)"))
	if t.Start != "" {
		fmt.Fprintf(w, "\n[the start page, before any action]\n")
		writeBlock(w, "  ", t.Start)
		if t.StartScreenshot != "" {
			fmt.Fprintf(w, "  screenshot %s\n", t.StartScreenshot)
		}
	}
	if t.Parent != "" {
		fmt.Fprintf(w, "\n[steps 0-%d: the prefix, stored once in its parent %s (inspect DIR -episode %s shows them)]\n",
			t.BranchStep-1, t.Parent, t.Parent[:min(12, len(t.Parent))])
	}
	for _, s := range t.Steps {
		fmt.Fprintf(w, "\n[step %d]", s.Index)
		if s.FinishReason != "" {
			fmt.Fprintf(w, " finish_reason %s", s.FinishReason)
		}
		fmt.Fprintf(w, "  (policy %.1f ms, environment %.1f ms)\n", s.PolicyMS, s.EnvMS)
		if s.TokenPath != "" {
			fmt.Fprintf(w, "  tokens: %s via %s (%s)\n", s.TokenPath, orNone(s.TokenEndpoints, "?"), orNone(s.Model, "model not reported"))
		}
		if len(s.PromptImages) > 0 {
			fmt.Fprintf(w, "  images in the prompt: %d\n", len(s.PromptImages))
		}
		if s.Reasoning != "" {
			fmt.Fprintf(w, "  reasoning:\n")
			writeBlock(w, "    ", s.Reasoning)
		}
		if s.ModelText != "" {
			fmt.Fprintf(w, "  model:\n")
			writeBlock(w, "    ", s.ModelText)
		}
		switch {
		case s.ActionKind == "":
			fmt.Fprintf(w, "  action: none\n")
		case string(s.Arguments) == "{}" || len(s.Arguments) == 0:
			fmt.Fprintf(w, "  action: %s\n", s.ActionKind)
		default:
			fmt.Fprintf(w, "  action: %s %s\n", s.ActionKind, s.Arguments)
		}
		if runtime.ActionKind(s.ActionKind) != runtime.ActDone && s.ActionKind != "" {
			fmt.Fprintf(w, "  observation, as the model saw it:\n")
			writeBlock(w, "    ", s.Observation)
		}
		if s.Screenshot != nil {
			where := s.Screenshot.Stored
			switch {
			case s.Screenshot.File != "":
				where = "written to " + s.Screenshot.File
			case where == "none":
				where = "pixels not kept (capture pixels=none)"
			default:
				where = "stored in the " + where
			}
			fmt.Fprintf(w, "  screenshot: %dx%d sha256 %.16s…, %s\n", s.Screenshot.Width, s.Screenshot.Height, s.Screenshot.SHA256, where)
		}
		if s.A11yBytes > 0 {
			fmt.Fprintf(w, "  accessibility tree: %d bytes\n", s.A11yBytes)
		}
		for _, r := range s.Rewards {
			fmt.Fprintf(w, "  reward %s = %s\n", r.Name, fmtMean(r.Value))
		}
	}
	if t.Answer != "" {
		fmt.Fprintf(w, "\n[answer]\n")
		writeBlock(w, "  ", t.Answer)
	}
	fmt.Fprintf(w, "\n[rewards]\n")
	if len(t.Rewards) == 0 {
		fmt.Fprintf(w, "  none\n")
	}
	for _, r := range t.Rewards {
		at := "episode"
		if r.Step != nil {
			at = "step " + strconv.Itoa(int(*r.Step))
		}
		fmt.Fprintf(w, "  %s = %s  (%s; exit code %d", r.Name, fmtMean(r.Value), at, r.ExitCode)
		if r.Source != "" {
			fmt.Fprintf(w, "; from %s", r.Source)
		}
		fmt.Fprintln(w, ")")
		if r.Detail != "" {
			writeBlock(w, "    ", r.Detail)
		}
	}
	if t.Tree != nil {
		writeTree(w, t.Tree, t.EpisodeID)
	}
}

// writeBlock writes text line by line after indent ("" as "(empty)").
func writeBlock(w io.Writer, indent, text string) {
	text = strings.TrimRight(text, "\n")
	if text == "" {
		text = "(empty)"
	}
	for _, l := range strings.Split(text, "\n") {
		fmt.Fprintf(w, "%s%s\n", indent, l)
	}
}

// writeWrappedList writes items after head, comma-separated, in lines of
// at most 100 columns.
func writeWrappedList(w io.Writer, head string, items []string) {
	line := head
	pad := strings.Repeat(" ", len(head))
	for i, it := range items {
		if i > 0 {
			it = ", " + it
		}
		if len(line)+len(it) > 100 && line != head {
			fmt.Fprintln(w, line+",")
			line = pad + strings.TrimPrefix(it, ", ")
			continue
		}
		line += it
	}
	fmt.Fprintln(w, line)
}

func settings(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// orderedExits returns the keys of m in runtime's order of exit reasons,
// unknown ones last.
func orderedExits[V any](m map[string]V) []string {
	var out []string
	for _, e := range runtime.ExitReasons() {
		if _, ok := m[string(e)]; ok {
			out = append(out, string(e))
		}
	}
	for _, k := range sortedKeys(m) {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// exits lists exit reasons in runtime's order, scaffold losses starred.
func exits(by map[string]int) string {
	var parts []string
	known := runtime.ExitReasons()
	for _, e := range known {
		if n := by[string(e)]; n > 0 {
			tag := ""
			if e.ScaffoldLoss() {
				tag = "*"
			}
			parts = append(parts, fmt.Sprintf("%s%s=%d", e, tag, n))
		}
	}
	for _, k := range sortedKeys(by) {
		if !slices.Contains(known, runtime.ExitReason(k)) {
			parts = append(parts, fmt.Sprintf("%s*=%d", k, by[k])) // unknown counts as a loss
		}
	}
	return strings.Join(parts, " ")
}

// plural is "1 task", "2 tasks".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func fmtMean(v *float64) string {
	if v == nil {
		return "-"
	}
	return num(*v)
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

func bar(n, most int) string {
	if most == 0 {
		return ""
	}
	return strings.Repeat("#", (n*40+most-1)/most)
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// thousands writes n with a comma every three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// conversationSettings are a recorded conversation's settings as key=value,
// sorted by key, whatever their JSON type: strings as they are (a long or
// multi-line one as its length), lists of strings comma-joined, anything
// else as its JSON.
func conversationSettings(c policy.Conversation) []string {
	b, err := json.Marshal(c)
	if err != nil {
		return []string{"(unreadable: " + err.Error() + ")"}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return []string{"(unreadable: " + err.Error() + ")"}
	}
	// What the model was shown of GUI observations, also where a manifest
	// that predates the field left it out (text).
	fields["observe"], _ = json.Marshal(c.Shows())
	var parts []string
	for _, k := range sortedKeys(fields) {
		raw := fields[k]
		var v string
		var list []string
		switch {
		case json.Unmarshal(raw, &v) == nil:
			if len(v) > 60 || strings.Contains(v, "\n") {
				v = fmt.Sprintf("(%d bytes)", len(v))
			}
		case json.Unmarshal(raw, &list) == nil:
			v = strings.Join(list, ",")
		default:
			v = string(raw)
		}
		parts = append(parts, k+"="+v)
	}
	return parts
}
