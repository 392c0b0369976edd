package hf

import (
	"fmt"
	"strings"
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
	"messages":          "The conversation: system?, user, then per step an assistant message with one tool call (arguments as a JSON string) and a tool message with the observation.",
	"tools":             "The action tools as a JSON string (OpenAI function-tool objects).",
	"screenshots":       "The episode's screenshots in step order, PNG bytes embedded.",
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
}

// card returns README.md: YAML front matter with configs and dataset_info
// (features and exact split sizes), then a short description.
func (w *Writer) card() string {
	var b strings.Builder
	b.WriteString("---\nconfigs:\n- config_name: default\n  data_files:\n")
	for _, s := range w.splits {
		fmt.Fprintf(&b, "  - split: %s\n    path: data/%s-*\n", s.name, s.name)
	}
	b.WriteString("dataset_info:\n  features:\n")
	b.WriteString(w.fs.YAML(2))
	b.WriteString("  splits:\n")
	for _, s := range w.splits {
		fmt.Fprintf(&b, "  - name: %s\n    num_examples: %d\n", s.name, s.rows)
	}
	b.WriteString("tags:\n- agent-trajectories\n- forkline\n---\n\n")

	fmt.Fprintf(&b, "# Agent trajectories (forkline)\n\nExported by forkline's `export -to hf`, one row per %s.\n\n", w.opt.Rows)
	b.WriteString("| split | rows |\n|---|---|\n")
	for _, s := range w.splits {
		fmt.Fprintf(&b, "| %s | %d |\n", s.name, s.rows)
	}
	if len(w.opt.Provenance) > 0 {
		b.WriteString("\n## Source\n\n")
		for _, p := range w.opt.Provenance {
			fmt.Fprintf(&b, "- %s\n", p)
		}
	}
	b.WriteString("\n## Loading\n\n```python\nfrom datasets import load_dataset\nds = load_dataset(\"path/to/this/directory\")  # or the Hub repo id\n```\n\n")
	b.WriteString("Every column is nullable. Screenshots are `Image` features with the PNG bytes embedded. ")
	b.WriteString("The `huggingface` schema metadata of each Parquet file carries the same features.\n\n")
	b.WriteString("## Columns\n\n| column | description |\n|---|---|\n")
	for _, f := range w.fs {
		fmt.Fprintf(&b, "| `%s` | %s |\n", f.Name, columnDocs[f.Name])
	}
	return b.String()
}
