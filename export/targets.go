package export

import (
	"io"
	"slices"
	"strings"

	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/chat"
	"github.com/forkline/forkline/formats/hf"
	"github.com/forkline/forkline/formats/jsonl"
	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/formats/verl"
)

// sink is what the pipeline needs of a target writer; every formats/
// package has one. Write may return a *model.Refusal for an episode the
// target cannot represent; Close finishes the files and must be called,
// also after an error.
type sink interface {
	Write(ep *model.Episode) error
	Close() error
}

// counter is a sink that writes something other than one unit per episode
// (dpo: pairs); the report takes its counts after Close.
type counter interface {
	Counts() map[string]int64
	Unit() string
	Refusals() map[string]int64 // left out after Write accepted them
}

// targetSpec describes one target.
type targetSpec struct {
	summary string
	layout  string // for the usage text
	file    bool   // Out is a file (or -), not a directory
	// columnar: it writes Parquet or Arrow row groups, holding the batch
	// being built and the one being encoded (TargetInfo.Columnar).
	columnar bool
	rows     []string
	options  []string // the target options it takes (Options fields); Rows when rows is set
	groups   bool     // needs every selected episode's group and reward first (a first pass)
	open     func(dir string, c *openContext) (sink, error)
}

func (s targetSpec) takes(field string) bool {
	if field == "Rows" {
		return len(s.rows) > 0
	}
	return slices.Contains(s.options, field)
}

// openContext is what a target may need when it opens.
type openContext struct {
	o           *Options // with defaults
	splits      []string
	provenance  []string
	allThinking bool      // every input records enable_thinking
	anyImages   bool      // an input's model saw images (policy.Conversation.Observe)
	stream      io.Writer // file targets: where to write
	groups      *groups   // targets with groups set
	// toolVersions is the forkline version that wrote each input, by run id.
	toolVersions map[string]string
}

// The option sets.
var (
	conversationOptions = []string{"ToolArgs", "CallContent", "Reasoning"}
	cardOptions         = []string{"License", "TaskCategories", "Languages"}
)

func hfOptions(c *openContext) hf.Options {
	return hf.Options{Rows: hf.RowsPer(c.o.Rows), Provenance: c.provenance, Conversation: c.o.conversation(),
		License: c.o.License, TaskCategories: c.o.TaskCategories, Languages: c.o.Languages}
}

var targets = map[string]targetSpec{
	"jsonl": {
		summary: "every native column, one episode per line with its steps and rewards (lossless, for jq)",
		layout:  "FILE (or - for stdout); one split only",
		file:    true,
		open: func(_ string, c *openContext) (sink, error) {
			return jsonl.NewWriter(c.stream), nil
		},
	},
	"verl-agent": {
		columnar: true,
		summary:  "verl AgentLoopOutput token rows, per episode or per model turn (Rows turn); refuses episodes without a token record or a reward",
		layout:   "DIR/<split>.parquet",
		rows:     []string{string(verl.RowsEpisode), string(verl.RowsTurn)},
		options:  []string{"Advantage", "MaxPromptTokens", "MaxResponseTokens"},
		groups:   true,
		open: func(dir string, c *openContext) (sink, error) {
			return verl.NewAgentWriter(dir, c.splits, verl.AgentOptions{Rows: verl.RowsPer(c.o.Rows),
				MaxPromptTokens: c.o.MaxPromptTokens, MaxResponseTokens: c.o.MaxResponseTokens,
				Advantage: c.o.Advantage, Groups: c.groups.verl()})
		},
	},
	"verl-sft": {
		columnar: true,
		summary:  "verl MultiTurnSFTDataset parquet: messages, tools, enable_thinking, images with <image> placeholders when the model saw screenshots (with docs/verl_sft_dataset.py)",
		layout:   "DIR/<split>.parquet",
		options:  conversationOptions,
		open: func(dir string, c *openContext) (sink, error) {
			return verl.NewSFTWriter(dir, c.splits, c.allThinking, c.anyImages, c.o.conversation()), nil
		},
	},
	"hf": {
		columnar: true,
		summary:  "Hugging Face parquet with features metadata and a dataset card (Rows)",
		layout:   "DIR/README.md, DIR/data/<split>-NNNNN-of-MMMMM.parquet",
		rows:     []string{string(hf.RowsEpisode), string(hf.RowsStep)},
		options:  append(slices.Clone(conversationOptions), cardOptions...),
		open: func(dir string, c *openContext) (sink, error) {
			return hf.NewWriter(dir, c.splits, hfOptions(c))
		},
	},
	"hf-disk": {
		columnar: true,
		summary:  "Hugging Face save_to_disk layout, Arrow IPC streams (Rows)",
		layout:   "DIR/dataset_dict.json, DIR/<split>/{data-NNNNN-of-MMMMM.arrow,state.json,dataset_info.json}",
		rows:     []string{string(hf.RowsEpisode), string(hf.RowsStep)},
		options:  append(slices.Clone(conversationOptions), "License"),
		open: func(dir string, c *openContext) (sink, error) {
			return hf.NewDiskWriter(dir, c.splits, hfOptions(c))
		},
	},
	"sft-tokens": {
		columnar: true,
		summary:  "TRL pre-tokenized SFT from the server's token ids: input_ids, assistant_masks (Rows episode|turn)",
		layout:   "DIR/README.md, DIR/data/<split>-NNNNN-of-MMMMM.parquet",
		rows:     []string{"episode", "turn"},
		options:  cardOptions,
		open: func(dir string, c *openContext) (sink, error) {
			o := hfOptions(c)
			o.Rows = hf.RowsTokens
			if c.o.Rows == "turn" {
				o.Rows = hf.RowsTokenTurns
			}
			return hf.NewWriter(dir, c.splits, o)
		},
	},
	"chat-jsonl": {
		summary: "OpenAI/TRL chat fine-tuning lines: messages with tool calls and per-turn weight, tools",
		layout:  "DIR/<split>.jsonl",
		options: conversationOptions,
		open: func(dir string, c *openContext) (sink, error) {
			return chat.NewJSONLWriter(dir, c.splits, c.o.conversation()), nil
		},
	},
	"dpo": {
		summary: "preference pairs from a group's episodes whose rewards differ: TRL or OpenAI lines (Pairs, DPOFormat)",
		layout:  "DIR/<split>.jsonl",
		options: append([]string{"Pairs", "DPOFormat"}, conversationOptions...),
		groups:  true,
		open: func(dir string, c *openContext) (sink, error) {
			return newPairSink(dir, c), nil
		},
	},
}

// removed are targets that existed once, with why they went and what to
// use instead.
var removed = map[string]string{
	"verl-rl": "was removed: its prompt rows loaded in verl's RLHFDataset but could not be trained — " +
		"no verl reward function scores forkline's verify command (a shell command that must run in the episode's sandbox) " +
		"and no verl tool drives a forkline sandbox, so verl fell back to a single-turn loop without tools. " +
		"Online RL needs an environment server, which forkline does not have yet; train on collected episodes with Target verl-agent " +
		"(docs/verl_agent_loop.py)",
}

// Targets returns the names of the targets, sorted.
func Targets() []string {
	var n []string
	for k := range targets {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// TargetInfo describes a target for usage text.
type TargetInfo struct {
	Summary string // what the target writes, one line
	Layout  string // the files it writes under Out
	File    bool   // Out is a file (or "-" for Stdout), not a directory
	// Columnar targets write Parquet or Arrow row groups: an export to one
	// holds a batch being built and one being encoded (about 100 MB); the
	// others write lines as they go and hold tens of MB.
	Columnar bool
}

// Describe returns what target writes. An unknown name fails with the list
// of known ones, wrapping ErrBadInput.
func Describe(target string) (TargetInfo, error) {
	spec, err := lookup(target)
	if err != nil {
		return TargetInfo{}, err
	}
	return TargetInfo{Summary: spec.summary, Layout: spec.layout, File: spec.file, Columnar: spec.columnar}, nil
}

func lookup(target string) (targetSpec, error) {
	spec, ok := targets[target]
	if !ok {
		if why, gone := removed[target]; gone {
			return targetSpec{}, badField(fielderr.Sentence("export", "Target", target, "%s", why).Mentions("Target"))
		}
		return targetSpec{}, bad("export: unknown target %q (known: %s)", target, strings.Join(Targets(), ", "))
	}
	return spec, nil
}

// targetsWith names the targets that take an option: "hf and hf-disk".
func targetsWith(takes func(targetSpec) bool) string {
	var n []string
	for _, name := range Targets() {
		if takes(targets[name]) {
			n = append(n, name)
		}
	}
	if len(n) < 2 {
		return strings.Join(n, "")
	}
	return strings.Join(n[:len(n)-1], ", ") + " and " + n[len(n)-1]
}
