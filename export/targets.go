package export

import (
	"io"
	"slices"
	"strings"

	"github.com/forkline/forkline/export/model"
	"github.com/forkline/forkline/formats/chat"
	"github.com/forkline/forkline/formats/hf"
	"github.com/forkline/forkline/formats/jsonl"
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

// targetSpec describes one target.
type targetSpec struct {
	summary  string
	layout   string // for the usage text
	file     bool   // Out is a file (or -), not a directory
	rows     bool   // takes Options.Rows
	toolArgs bool   // takes Options.ToolArgs
	open     func(dir string, c *openContext) (sink, error)
}

// openContext is what a target may need when it opens.
type openContext struct {
	o           *Options // with defaults
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
			return jsonl.NewWriter(c.stream), nil
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
		rows:    true,
		open: func(dir string, c *openContext) (sink, error) {
			return hf.NewWriter(dir, c.splits, hf.Options{Rows: c.o.Rows, Provenance: c.provenance})
		},
	},
	"hf-disk": {
		summary: "Hugging Face save_to_disk layout, Arrow IPC streams (-rows)",
		layout:  "DIR/dataset_dict.json, DIR/<split>/{data-NNNNN-of-MMMMM.arrow,state.json,dataset_info.json}",
		rows:    true,
		open: func(dir string, c *openContext) (sink, error) {
			return hf.NewDiskWriter(dir, c.splits, hf.Options{Rows: c.o.Rows, Provenance: c.provenance})
		},
	},
	"dpo-jsonl": {
		summary:  "TRL preference pairs (prompt, chosen, rejected): siblings of one group whose rewards differ, the shared prefix as the prompt (-tool-args)",
		layout:   "DIR/<split>.jsonl",
		toolArgs: true,
		open: func(dir string, c *openContext) (sink, error) {
			return chat.NewPreferenceWriter(dir, c.splits, c.o.ToolArgs)
		},
	},
	"chat-jsonl": {
		summary:  "OpenAI/TRL chat fine-tuning lines: messages, tools, tool_calls (-tool-args)",
		layout:   "DIR/<split>.jsonl",
		toolArgs: true,
		open: func(dir string, c *openContext) (sink, error) {
			return chat.NewJSONLWriter(dir, c.splits, c.o.ToolArgs)
		},
	},
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
}

// Describe returns what target writes. An unknown name fails with the list
// of known ones, wrapping ErrBadInput.
func Describe(target string) (TargetInfo, error) {
	spec, err := lookup(target)
	if err != nil {
		return TargetInfo{}, err
	}
	return TargetInfo{Summary: spec.summary, Layout: spec.layout, File: spec.file}, nil
}

func lookup(target string) (targetSpec, error) {
	spec, ok := targets[target]
	if !ok {
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
