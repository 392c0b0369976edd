package hf

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/forkline/forkline/fielderr"

	"github.com/forkline/forkline/formats/model"
)

// columnDocs describes every column of both row shapes, for the card.
var columnDocs = map[string]string{
	"episode_id":        "Deterministic episode id (task, task spec hash, repeat, seed).",
	"run_id":            "The collection run the episode comes from.",
	"task_id":           "Task id from the task spec.",
	"instruction":       "The task's instruction (the user message).",
	"exit_reason":       "How the episode ended: done, max_steps, timeout, no_action, unparsed_action, output_truncated, policy_error, env_error, cancelled or unknown.",
	"answer":            "The done action's answer.",
	"steps":             "Number of steps.",
	"reward":            "The selected episode-level reward (null when the verifier gave none).",
	"rewards":           "Every reward row of the episode: name, step_index (null for episode-level), value (null when none).",
	"group_id":          "The episodes that started from the same state with the same prompt (GRPO/RLOO group, preference pairs): the collector's group_id, else derived from task id, task hash, golden id and prompt.",
	"messages":          "The conversation as the model had it, one Json message each with exactly its keys: system?, user, then per step an assistant message with the model's tool calls (the done call included) and a tool message per call.",
	"tools":             "The function tools the model was offered, one Json object each, in the key order the policy sent them; null for text tool calls.",
	"screenshots":       "One entry per step, in step order: the step's screenshot (PNG bytes embedded), null where it took none.",
	"images":            "TRL's VLM format: the images the messages' {\"type\": \"image\"} content parts stand for, in the same order (PNG bytes embedded): each screenshot where the model saw it, the start page's first; empty when the model saw no images.",
	"screenshot_before": "The screenshot the model saw before it chose this step's action: the start page's for the first step, else the latest one an earlier step took; null when it had seen none.",
	"tool_calls":        "The function calls the model's server returned, as JSON, arguments as the model wrote them; null for text tool calls.",
	"prompt_ids":        "Token ids of the prompt (episode rows: the first model call's prompt).",
	"response_ids":      "Token ids after the prompt: model tokens and environment tokens.",
	"response_mask":     "1 for model tokens, 0 for environment tokens; same length as response_ids.",
	"response_logprobs": "Log probabilities aligned with response_ids (0.0 for environment tokens); null when the server reported none.",
	"token_drift":       "A later prompt did not extend the earlier token ids; the token record stops before that turn.",
	"duration_ms":       "Wall time of the episode.",
	"step_index":        "Step number, from 0.",
	"action_kind":       "The canonical action's kind; empty when the model turn produced no action.",
	"action_json":       "The canonical action as JSON.",
	"model_text":        "The model's raw text for this step.",
	"reasoning":         "The model's separate reasoning text.",
	"output":            "The observation's text (UTF-8; capped per capture policy).",
	"exit_code":         "Command exit status; -1 when killed or not a command.",
	"is_error":          "The action failed.",
	"error_kind":        "Why it failed: exit_status, timeout, path_refused, not_found, unsupported, action_failed.",
	"timed_out":         "The per-action timeout fired.",
	"truncated":         "The output was capped.",
	"screenshot":        "Screenshot after the action, PNG bytes embedded.",
	"screenshot_sha256": "Hex sha256 of the screenshot PNG.",
	"a11y_tree":         "Accessibility tree as compact JSON.",
	"policy_ms":         "Time the policy took to decide.",
	"env_ms":            "Time the environment took to act.",
	"step_reward":       "The selected reward attached to this step, if any.",
	"episode_reward":    "The selected episode-level reward.",
	"input_ids":         "Token ids as the inference server reported them: the prompt, then the response (episode rows: every later model and environment token).",
	"assistant_masks":   "1 on the model's tokens, 0 on the prompt and environment tokens; TRL builds its labels from it.",
	"turn":              "The model turn the row comes from, from 0; null for an episode row.",
}

// Card metadata identifiers: Hub license ids (apache-2.0, cc-by-4.0,
// other, ...), task categories (text-generation, ...) and language codes
// (en, pt-BR, ...) are plain tokens, so nothing given on a command line can
// break out of the YAML front matter.
var (
	cardToken    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)
	languageCode = regexp.MustCompile(`^[a-z]{2,3}([_-][A-Za-z0-9]{2,8})*$`)
)

// CheckCardMeta reports a license, task category or language that is not a
// plain Hub identifier.
func CheckCardMeta(license string, taskCategories, languages []string) error {
	return checkCardMeta(Options{License: license, TaskCategories: taskCategories, Languages: languages})
}

func checkCardMeta(o Options) error {
	if o.License != "" && !cardToken.MatchString(o.License) {
		return fielderr.Errorf("hf", "License", strconv.Quote(o.License), "want a Hub license id such as apache-2.0, cc-by-4.0, mit or other")
	}
	for _, c := range o.TaskCategories {
		if !cardToken.MatchString(c) {
			return fielderr.Errorf("hf", "TaskCategories", strconv.Quote(c), "want a Hub task category such as text-generation")
		}
	}
	for _, l := range o.Languages {
		if !languageCode.MatchString(l) {
			return fielderr.Errorf("hf", "Languages", strconv.Quote(l), "want a language code such as en or pt-BR")
		}
	}
	return nil
}

// sizeCategories are the Hub's size_categories values, by the number of
// examples below which each one applies (the last has no bound).
var sizeCategories = []struct {
	below int64
	name  string
}{
	{1_000, "n<1K"}, {10_000, "1K<n<10K"}, {100_000, "10K<n<100K"}, {1_000_000, "100K<n<1M"},
	{10_000_000, "1M<n<10M"}, {100_000_000, "10M<n<100M"}, {1_000_000_000, "100M<n<1B"},
	{10_000_000_000, "1B<n<10B"}, {100_000_000_000, "10B<n<100B"}, {1_000_000_000_000, "100B<n<1T"},
}

// SizeCategory is the Hub's size_categories value for a dataset of n
// examples (rows, over every split).
func SizeCategory(n int64) string {
	for _, c := range sizeCategories {
		if n < c.below {
			return c.name
		}
	}
	return "n>1T"
}

// card returns README.md: YAML front matter with the card metadata given
// (license, task_categories, language), configs and dataset_info (features
// and exact split sizes) for the splits that got rows, then a description.
func (w *Writer) card() string {
	var b strings.Builder
	b.WriteString("---\n")
	if w.opt.License != "" {
		fmt.Fprintf(&b, "license: %s\n", w.opt.License)
	}
	if len(w.opt.TaskCategories) > 0 {
		b.WriteString("task_categories:\n")
		for _, c := range w.opt.TaskCategories {
			fmt.Fprintf(&b, "- %s\n", c)
		}
	}
	if len(w.opt.Languages) > 0 {
		b.WriteString("language:\n")
		for _, l := range w.opt.Languages {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	written := w.written()
	var examples, download int64
	for _, s := range written {
		examples += s.rows
		download += s.bytes
	}
	fmt.Fprintf(&b, "size_categories:\n- %s\n", SizeCategory(examples))
	b.WriteString("configs:\n- config_name: default\n  data_files:\n")
	for _, s := range written {
		fmt.Fprintf(&b, "  - split: %s\n    path: data/%s-*\n", s.name, s.name)
	}
	b.WriteString("dataset_info:\n  features:\n")
	b.WriteString(w.fs.YAML(2))
	b.WriteString("  splits:\n")
	for _, s := range written {
		fmt.Fprintf(&b, "  - name: %s\n    num_examples: %d\n", s.name, s.rows)
	}
	// download_size is the data files' bytes, what the Hub and datasets
	// download. num_bytes and dataset_size (the decoded Arrow size, which
	// only datasets computes) are left out: no loader checks them, and a
	// guess would be a wrong number on the Hub's page.
	fmt.Fprintf(&b, "  download_size: %d\n", download)
	b.WriteString("tags:\n- agent-trajectories\n- forkline\n---\n\n")

	switch w.opt.Rows {
	case RowsTokens, RowsTokenTurns:
		per := "episode (its assembled token record)"
		if w.opt.Rows == RowsTokenTurns {
			per = "model turn (that turn's prompt and response ids)"
		}
		fmt.Fprintf(&b, "# Agent trajectories (forkline), pre-tokenized\n\nExported by forkline's `export -to sft-tokens`, one row per %s, "+
			"from the token ids the inference server reported: `input_ids` and `assistant_masks` (1 on the model's tokens), "+
			"which TRL's SFTTrainer trains on without tokenizing again.\n\n", per)
	default:
		fmt.Fprintf(&b, "# Agent trajectories (forkline)\n\nExported by forkline's `export -to hf`, one row per %s.\n\n", w.opt.Rows)
	}
	b.WriteString("| split | rows | episodes not ended by `done` or rewarded below 1 |\n|---|---|---|\n")
	var unsuccessful int64
	var empty []string
	for _, s := range w.splits {
		if s.rows == 0 {
			empty = append(empty, s.name)
			continue
		}
		unsuccessful += s.unsuccessful
		fmt.Fprintf(&b, "| %s | %d | %d |\n", s.name, s.rows, s.unsuccessful)
	}
	b.WriteString("\nEvery selected episode is included, failed ones too: ")
	if unsuccessful > 0 {
		fmt.Fprintf(&b, "%d did not end in `done` or have a reward below 1 (or none). ", unsuccessful)
	} else {
		b.WriteString("here none did. ")
	}
	b.WriteString("To train only on successes, export with `-min-reward 1` (or `-where exit_reason=done`).\n")
	if len(empty) > 0 {
		fmt.Fprintf(&b, "\nSplits that got no episode are not written (`datasets` cannot load an empty split): %s.\n", strings.Join(empty, ", "))
	}
	if len(w.opt.Provenance) > 0 {
		b.WriteString("\n## Source\n\n")
		for _, p := range w.opt.Provenance {
			fmt.Fprintf(&b, "- %s\n", p)
		}
	}
	b.WriteString("\n## Loading\n\n```python\nfrom datasets import load_dataset  # datasets >= 4.7 (the Json feature)\nds = load_dataset(\"path/to/this/directory\")  # or the Hub repo id\n```\n\n")
	b.WriteString("## Publishing\n\nThis directory is a Hub dataset repository as it stands (this card, its `configs` and the files they name):\n\n")
	b.WriteString("```sh\nhuggingface-cli upload ORG/NAME path/to/this/directory . --repo-type dataset\n```\n\n")
	b.WriteString("Every column is nullable. ")
	if w.opt.Rows == RowsEpisode {
		b.WriteString("`messages` and `tools` are lists of `Json` values: each message has exactly its own keys ")
		b.WriteString("(no `None` keys for templates to trip on) and tool-call arguments are ")
		if w.opt.Conversation.Args == model.ArgsString {
			b.WriteString("JSON strings, as the model wrote them. ")
		} else {
			b.WriteString("objects, as chat templates that apply `tojson` expect. ")
		}
	}
	if w.opt.Rows == RowsEpisode || w.opt.Rows == RowsStep {
		b.WriteString("Screenshots are `Image` features with the PNG bytes embedded")
		if w.opt.Rows == RowsEpisode {
			b.WriteString(", one entry per step (null where the step took none)")
		}
		b.WriteString(". ")
	}
	b.WriteString("The `huggingface` schema metadata of each Parquet file carries the same features.\n\n")
	b.WriteString("## Columns\n\n| column | description |\n|---|---|\n")
	for _, f := range w.fs {
		fmt.Fprintf(&b, "| `%s` | %s |\n", f.Name, columnDocs[f.Name])
	}
	return b.String()
}
