package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/formats/chat"
	"github.com/forkline/forkline/formats/hf"
	"github.com/forkline/forkline/formats/jsonl"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/formats/verl"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// config is what the flags say.
type config struct {
	Inputs     []string
	Target     string
	Out        string
	Force      bool
	Where      []where
	MinReward  *float64
	Tasks      []string
	RewardName string
	Split      []splitPart
	Rows       hf.RowsPer
	ToolArgs   chat.ToolArgs
}

// badInput marks errors caused by the input (exit 2).
type badInput struct{ err error }

func (b badInput) Error() string { return b.err.Error() }
func (b badInput) Unwrap() error { return b.err }

func bad(format string, args ...any) error { return badInput{fmt.Errorf(format, args...)} }

// sink is what the pipeline needs of a target writer. Write may return a
// *chat.Refusal for an episode the target cannot represent; Close finishes
// the files and must be called, also after an error.
type sink interface {
	Write(ep *chat.Episode) error
	Close() error
}

// targetSpec describes one -to target.
type targetSpec struct {
	summary string
	layout  string // for the usage text
	file    bool   // -out is a file (or -), not a directory
	open    func(dir string, c *openContext) (sink, error)
}

// openContext is what a target may need when it opens.
type openContext struct {
	cfg         *config
	splits      []string
	provenance  []string
	allThinking bool      // every input records enable_thinking
	stream      io.Writer // file targets: where to write
}

var targets = map[string]targetSpec{
	"jsonl": {
		summary: "every native column, one episode per line with its steps and rewards (lossless, for jq)",
		layout:  "FILE (or - for stdout); one split only",
		file:    true,
		open: func(_ string, c *openContext) (sink, error) {
			return newJSONLSink(c.stream), nil
		},
	},
	"verl-agent": {
		summary: "verl AgentLoopOutput token rows (refuses episodes without a token record)",
		layout:  "DIR/<split>.parquet",
		open: func(dir string, c *openContext) (sink, error) {
			return verl.NewAgentWriter(dir, c.splits)
		},
	},
	"verl-rl": {
		summary: "verl RLHFDataset prompt parquet",
		layout:  "DIR/<split>.parquet",
		open: func(dir string, c *openContext) (sink, error) {
			return verl.NewRLWriter(dir, c.splits)
		},
	},
	"verl-sft": {
		summary: "verl MultiTurnSFTDataset parquet: messages, tools, enable_thinking",
		layout:  "DIR/<split>.parquet",
		open: func(dir string, c *openContext) (sink, error) {
			return verl.NewSFTWriter(dir, c.splits, c.allThinking)
		},
	},
	"hf": {
		summary: "Hugging Face parquet with features metadata and a dataset card (-rows)",
		layout:  "DIR/README.md, DIR/data/<split>-NNNNN-of-MMMMM.parquet",
		open: func(dir string, c *openContext) (sink, error) {
			return hf.NewWriter(dir, c.splits, hf.Options{Rows: c.cfg.Rows, Provenance: c.provenance})
		},
	},
	"hf-disk": {
		summary: "Hugging Face save_to_disk layout, Arrow IPC streams (-rows)",
		layout:  "DIR/dataset_dict.json, DIR/<split>/{data-NNNNN-of-MMMMM.arrow,state.json,dataset_info.json}",
		open: func(dir string, c *openContext) (sink, error) {
			return hf.NewDiskWriter(dir, c.splits, hf.Options{Rows: c.cfg.Rows, Provenance: c.provenance})
		},
	},
	"chat-jsonl": {
		summary: "OpenAI/TRL chat fine-tuning lines: messages, tools, tool_calls (-tool-args)",
		layout:  "DIR/<split>.jsonl",
		open: func(dir string, c *openContext) (sink, error) {
			return chat.NewJSONLWriter(dir, c.splits, c.cfg.ToolArgs)
		},
	},
}

func targetNames() []string {
	var n []string
	for k := range targets {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// input is one opened -in dataset and what its manifest says.
type input struct {
	path      string
	ds        *shard.Dataset
	m         shard.Manifest
	tasks     map[string]task.Spec
	system    string
	thinking  *bool
	actions   []runtime.ActionKind // the tools offered; nil = all
	textCalls bool                 // tool_mode=text
	obsCap    int                  // observation_cap; 0 = whole observations
	noPixels  bool                 // capture pixels=none: hashes without blobs
	read      int64
	selected  int64
}

// summary is what an export did.
type summary struct {
	Inputs   []inputSummary   `json:"inputs"`
	Read     int64            `json:"episodes_read"`
	Filtered int64            `json:"filtered_out"`
	Written  map[string]int64 `json:"written"` // per split
	Refused  map[string]int64 `json:"refused"` // per reason
}

type inputSummary struct {
	Path     string `json:"path"`
	RunID    string `json:"run_id"`
	Status   string `json:"status"`
	Read     int64  `json:"episodes_read"`
	Selected int64  `json:"selected"`
}

// export runs the whole export. stdout is used when -out is "-".
func export(ctx context.Context, cfg *config, stdout io.Writer) (*summary, error) {
	spec, ok := targets[cfg.Target]
	if !ok {
		return nil, bad("export: unknown target %q (known: %s)", cfg.Target, strings.Join(targetNames(), ", "))
	}
	if spec.file && len(cfg.Split) > 1 {
		return nil, bad("export: -to %s writes one file; -split needs a directory target (chat-jsonl, hf, ...)", cfg.Target)
	}
	if !spec.file && cfg.Out == "-" {
		return nil, bad("export: -to %s writes a directory; -out - is for jsonl only", cfg.Target)
	}
	if cfg.Out != "-" {
		if err := checkOut(filepath.Clean(cfg.Out), cfg.Force, !spec.file); err != nil {
			return nil, err
		}
	}
	inputs, err := openInputs(cfg, !spec.file)
	if err != nil {
		return nil, err
	}
	if err := checkUniqueIDs(ctx, inputs); err != nil {
		return nil, err
	}
	oc := &openContext{cfg: cfg, splits: splitNames(cfg.Split), provenance: provenance(cfg, inputs), allThinking: true}
	for _, in := range inputs {
		oc.allThinking = oc.allThinking && in.thinking != nil
	}

	sum := &summary{Written: map[string]int64{}, Refused: map[string]int64{}}
	for _, s := range oc.splits {
		sum.Written[s] = 0
	}
	if spec.file {
		err = writeFileTarget(cfg, func(w io.Writer) error {
			oc.stream = w
			return runPipeline(ctx, cfg, spec, "", oc, inputs, sum)
		}, stdout)
	} else {
		err = writeDirTarget(cfg, func(dir string) error {
			return runPipeline(ctx, cfg, spec, dir, oc, inputs, sum)
		})
	}
	for _, in := range inputs {
		sum.Inputs = append(sum.Inputs, inputSummary{Path: in.path, RunID: in.m.RunID, Status: string(in.m.Status), Read: in.read, Selected: in.selected})
	}
	return sum, err
}

// openInputs opens every -in and reads its manifest's tasks and policy.
func openInputs(cfg *config, needTasks bool) ([]*input, error) {
	var out []*input
	for _, p := range cfg.Inputs {
		ds, err := shard.Open(p)
		if err != nil {
			return nil, badInput{fmt.Errorf("export: -in %s: %w", p, err)}
		}
		in := &input{path: p, ds: ds, m: ds.Manifest()}
		if len(out) > 0 && in.m.SchemaVersion != out[0].m.SchemaVersion {
			return nil, bad("export: -in %s has schema version %d, -in %s has %d; export runs of one schema version together",
				p, in.m.SchemaVersion, out[0].path, out[0].m.SchemaVersion)
		}
		in.tasks = map[string]task.Spec{}
		if len(in.m.Tasks) > 0 {
			if in.tasks, err = collect.ManifestTasks(in.m); err != nil {
				return nil, badInput{fmt.Errorf("export: -in %s: %w", p, err)}
			}
		} else if needTasks {
			return nil, bad("export: -in %s: the manifest records no task specs, so there is no instruction for the user message", p)
		}
		if err := readPolicy(in); err != nil {
			return nil, badInput{fmt.Errorf("export: -in %s: %w", p, err)}
		}
		var capt struct {
			Pixels string `json:"pixels"`
		}
		if len(in.m.Capture) > 0 {
			if err := json.Unmarshal(in.m.Capture, &capt); err != nil {
				return nil, bad("export: -in %s: manifest capture policy: %v", p, err)
			}
		}
		in.noPixels = capt.Pixels == "none"
		out = append(out, in)
	}
	return out, nil
}

// readPolicy takes what shaped the model's conversation from the policy
// options the manifest records: system_prompt (or system), enable_thinking,
// actions (the tools offered, comma-separated), tool_mode (text: calls
// written in the model's text) and observation_cap (bytes of an observation
// shown). Options a run did not record keep their neutral value: no system
// message, enable_thinking unknown, every action, function calls, whole
// observations.
func readPolicy(in *input) error {
	if len(in.m.Policy) == 0 {
		return nil
	}
	var pol struct {
		Options map[string]string `json:"options"`
	}
	if err := json.Unmarshal(in.m.Policy, &pol); err != nil {
		return fmt.Errorf("manifest policy: %w", err)
	}
	in.system = pol.Options["system_prompt"]
	if in.system == "" {
		in.system = pol.Options["system"]
	}
	if v, ok := pol.Options["enable_thinking"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("manifest policy option enable_thinking=%q is not a boolean", v)
		}
		in.thinking = &b
	}
	if v := pol.Options["actions"]; v != "" {
		for _, k := range strings.Split(v, ",") {
			k = strings.TrimSpace(k)
			if k == "" {
				continue
			}
			if _, _, ok := runtime.ActionFieldNames(runtime.ActionKind(k)); !ok {
				return fmt.Errorf("manifest policy option actions names unknown action %q", k)
			}
			in.actions = append(in.actions, runtime.ActionKind(k))
		}
	}
	in.textCalls = pol.Options["tool_mode"] == "text"
	if v, ok := pol.Options["observation_cap"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("manifest policy option observation_cap=%q is not a byte count", v)
		}
		in.obsCap = n
	}
	return nil
}

// checkUniqueIDs refuses inputs that share an episode id. It holds the ids
// (not the rows) of all inputs: the one part of an export that grows with
// the dataset, by about 100 bytes per episode.
func checkUniqueIDs(ctx context.Context, inputs []*input) error {
	if len(inputs) < 2 {
		return nil
	}
	seen := map[string]int{}
	for i, in := range inputs {
		for ep, err := range in.ds.Episodes() {
			if err != nil {
				return fmt.Errorf("export: -in %s: %w", in.path, err)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if j, dup := seen[ep.EpisodeID]; dup {
				if j == i {
					return fmt.Errorf("export: -in %s holds episode %s twice: %w", in.path, ep.EpisodeID, shard.ErrCorrupt)
				}
				return bad("export: episode %s is in both -in %s and -in %s; episode ids must be unique across inputs (the same run given twice?)",
					ep.EpisodeID, inputs[j].path, in.path)
			}
			seen[ep.EpisodeID] = i
		}
	}
	return nil
}

// provenance is the card's source lines: runs, selection and split.
func provenance(cfg *config, inputs []*input) []string {
	var out []string
	for _, in := range inputs {
		out = append(out, fmt.Sprintf("run `%s` (%s, schema version %d, %s %s)", in.m.RunID, in.m.Status, in.m.SchemaVersion, in.m.Tool, in.m.ToolVersion))
	}
	sel := []string{"reward: `" + cfg.RewardName + "`"}
	for _, w := range cfg.Where {
		sel = append(sel, "where `"+w.String()+"`")
	}
	if cfg.MinReward != nil {
		sel = append(sel, "min reward "+strconv.FormatFloat(*cfg.MinReward, 'g', -1, 64))
	}
	if len(cfg.Tasks) > 0 {
		sel = append(sel, "tasks "+strings.Join(cfg.Tasks, ", "))
	}
	out = append(out, "selection: "+strings.Join(sel, "; "))
	var parts []string
	for _, p := range cfg.Split {
		parts = append(parts, p.name+"="+strconv.FormatFloat(p.fraction, 'g', -1, 64))
	}
	out = append(out, "split: "+strings.Join(parts, ",")+" by the first 8 bytes of sha256(episode_id)")
	return out
}

// runPipeline streams every input's episodes, one at a time, through the
// filters and the split into the target.
func runPipeline(ctx context.Context, cfg *config, spec targetSpec, dir string, oc *openContext, inputs []*input, sum *summary) error {
	s, err := spec.open(dir, oc)
	if err != nil {
		return err
	}
	for _, in := range inputs {
		err = in.ds.EachEpisode(func(row schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			in.read++
			sum.Read++
			ep := &chat.Episode{Row: row, Steps: steps, Rewards: rewards, RewardName: cfg.RewardName,
				System: in.system, EnableThinking: in.thinking, Actions: in.actions, TextToolCalls: in.textCalls,
				ObservationCap: in.obsCap}
			if !selected(cfg, ep) {
				sum.Filtered++
				return nil
			}
			in.selected++
			ep.Split = assignSplit(cfg.Split, row.EpisodeID)
			if t, ok := in.tasks[row.TaskID]; ok {
				ep.Instruction = t.Instruction
				if t.Verify != nil {
					ep.VerifyCmd = t.Verify.Cmd
				}
			} else if !spec.file {
				return bad("export: -in %s: episode %s: task %q is not among the manifest's task specs", in.path, row.EpisodeID, row.TaskID)
			}
			if !in.noPixels {
				ep.Blob = in.ds.Blob
			}
			err := s.Write(ep)
			var ref *chat.Refusal
			switch {
			case errors.As(err, &ref):
				sum.Refused[ref.Reason]++
				return nil
			case err != nil:
				return err
			}
			sum.Written[ep.Split]++
			return nil
		})
		if err != nil {
			s.Close()
			return err
		}
	}
	if err := s.Close(); err != nil {
		return err
	}
	if spec.file {
		return nil // jsonl is a view of the run; an empty view is still one
	}
	return checkWritten(cfg, sum)
}

// checkWritten refuses an export that wrote nothing: filters that match no
// episode, or a target that refused them all, are mistakes to report, not
// an empty dataset to hand to a trainer.
func checkWritten(cfg *config, sum *summary) error {
	var written, refused int64
	for _, n := range sum.Written {
		written += n
	}
	for _, n := range sum.Refused {
		refused += n
	}
	if written > 0 {
		return nil
	}
	if refused > 0 {
		return bad("export: -to %s refused every one of the %d selected episodes (%s); nothing written", cfg.Target, refused, refusedText(sum.Refused))
	}
	return bad("export: no episode to write: %d read, %d filtered out; nothing written", sum.Read, sum.Filtered)
}

func refusedText(r map[string]int64) string {
	var reasons []string
	for k := range r {
		reasons = append(reasons, k)
	}
	slices.Sort(reasons)
	var parts []string
	for _, k := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s", r[k], k))
	}
	return strings.Join(parts, ", ")
}

// selected applies -task, -where and -min-reward.
func selected(cfg *config, ep *chat.Episode) bool {
	if len(cfg.Tasks) > 0 && !slices.Contains(cfg.Tasks, ep.Row.TaskID) {
		return false
	}
	for _, w := range cfg.Where {
		if !w.match(&ep.Row) {
			return false
		}
	}
	if cfg.MinReward != nil {
		r := ep.Reward()
		if r == nil || *r < *cfg.MinReward {
			return false
		}
	}
	return true
}

// writeDirTarget builds the output in a hidden sibling directory and moves
// it to cfg.Out only when every file is complete, so a failed or
// interrupted export leaves no directory that looks finished. -out must not
// exist, be an empty directory, or (with -force) is replaced.
func writeDirTarget(cfg *config, build func(dir string) error) error {
	out := filepath.Clean(cfg.Out) // checked by checkOut before the export began
	parent := filepath.Dir(out)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	stage, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := os.Chmod(stage, 0o755); err != nil {
		os.RemoveAll(stage)
		return fmt.Errorf("export: %w", err)
	}
	if err := build(stage); err != nil {
		os.RemoveAll(stage)
		return err
	}
	if err := syncTree(stage); err != nil {
		os.RemoveAll(stage)
		return fmt.Errorf("export: %w", err)
	}
	var old string
	if _, err := os.Stat(out); err == nil {
		old = stage + ".old"
		if err := os.Rename(out, old); err != nil {
			os.RemoveAll(stage)
			return fmt.Errorf("export: %w", err)
		}
	}
	if err := os.Rename(stage, out); err != nil {
		if old != "" {
			os.Rename(old, out)
		}
		os.RemoveAll(stage)
		return fmt.Errorf("export: %w", err)
	}
	if old != "" {
		os.RemoveAll(old)
	}
	return syncDir(parent)
}

// writeFileTarget writes a one-file target to a temporary name and renames
// it, or streams it to stdout for -out -.
func writeFileTarget(cfg *config, build func(w io.Writer) error, stdout io.Writer) error {
	if cfg.Out == "-" {
		return build(stdout)
	}
	tmp, err := os.CreateTemp(filepath.Dir(cfg.Out), "."+filepath.Base(cfg.Out)+".*.tmp")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = build(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if err = os.Chmod(tmp.Name(), 0o644); err == nil {
			err = os.Rename(tmp.Name(), cfg.Out)
		}
	}
	return err
}

// checkOut refuses to replace existing output unless forced: a directory
// target may go to a missing or empty directory, a file target to a missing
// file (the jsonl target has always replaced its file; it still does).
func checkOut(out string, force, dir bool) error {
	st, err := os.Stat(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if !dir {
		if st.IsDir() {
			return bad("export: -out %s is a directory; -to jsonl writes a file", out)
		}
		return nil
	}
	if !st.IsDir() {
		return bad("export: -out %s exists and is not a directory", out)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if len(entries) > 0 && !force {
		return bad("export: -out %s is not empty; choose another directory or pass -force to replace it", out)
	}
	return nil
}

// syncTree fsyncs every directory under root (the files were synced when
// closed), so the renamed tree is durable.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return syncDir(p)
		}
		return nil
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// jsonlSink writes the native jsonl target: formats/jsonl's line for every
// selected episode, from any number of inputs.
type jsonlSink struct {
	enc *json.Encoder
	bw  *bufio.Writer
}

func newJSONLSink(w io.Writer) *jsonlSink {
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &jsonlSink{enc: enc, bw: bw}
}

func (j *jsonlSink) Write(ep *chat.Episode) error {
	steps, rewards := ep.Steps, ep.Rewards
	if steps == nil {
		steps = []schemas.StepRow{}
	}
	if rewards == nil {
		rewards = []schemas.RewardRow{}
	}
	if err := j.enc.Encode(jsonl.Episode{EpisodeRow: ep.Row, Steps: steps, Rewards: rewards}); err != nil {
		return fmt.Errorf("jsonl: episode %s: %w", ep.Row.EpisodeID, err)
	}
	return nil
}

func (j *jsonlSink) Close() error { return j.bw.Flush() }
