package verl

import (
	"fmt"

	"github.com/forkline/forkline/formats/model"
)

// verl-sft's encoding. verl's MultiTurnSFTDataset reads the file with
// pandas (dtype_backend="pyarrow") and rebuilds each row's messages from
// the dataframe (_build_messages), and pyarrow turns every struct into a
// dict with all of the struct's keys, null ones as None: no Parquet
// encoding reaches verl's loader as key-less messages. So the columns keep
// the shapes verl reads and nothing of varying shape goes in a struct:
//
//   - messages: a list of {role, content, reasoning_content, tool_calls,
//     tool_call_id} structs (content always set, the rest null where it does
//     not apply), each tool call {id, type, function: {name, arguments}}
//     with the arguments as the JSON text the model wrote — a struct of
//     arguments would hold the union of every action's fields, nulls
//     included, and a chat template would render them;
//   - tools: the tool list as one JSON string, in the key order the model
//     was sent it — a struct would hold the union of every tool's
//     properties. verl's stock loader passes a string on to the chat
//     template, and transformers refuses tools that are not dicts: it fails
//     loudly instead of training on a wrong system prompt.
//
// docs/verl_sft_dataset.py is the dataset class (data.custom_cls) that
// turns rows back into what the model saw: None keys dropped (content
// kept), arguments decoded into objects (or kept as strings for templates
// that concatenate them), tools decoded. Its functions are tested against
// this file's rows and the real chat templates.

// SFTFeatures returns the verl-sft columns; withThinking adds
// enable_thinking.
func SFTFeatures(withThinking bool) model.Features {
	return sftFeatures(withThinking, false)
}

func sftFeatures(withThinking, withImages bool) model.Features {
	message := model.Struct{
		{Name: "role", Type: str},
		{Name: "content", Type: str},
		{Name: "reasoning_content", Type: str},
		{Name: "tool_calls", Type: model.List{Item: model.Struct{
			{Name: "id", Type: str},
			{Name: "type", Type: str},
			{Name: "function", Type: model.Struct{{Name: "name", Type: str}, {Name: "arguments", Type: str}}},
		}}},
		{Name: "tool_call_id", Type: str},
	}
	fs := model.Features{
		{Name: "messages", Type: model.List{Item: message}},
		{Name: "tools", Type: str},
	}
	if withThinking {
		fs = append(fs, model.Field{Name: "enable_thinking", Type: bl})
	}
	if withImages {
		fs = append(fs, model.Field{Name: "images", Type: model.List{Item: model.Image{}}})
	}
	return append(fs,
		model.Field{Name: "episode_id", Type: str},
		model.Field{Name: "task_id", Type: str},
		model.Field{Name: "group_id", Type: str},
		model.Field{Name: "exit_reason", Type: str},
		model.Field{Name: "reward", Type: f64},
	)
}

// SFTWriter writes verl-sft.
type SFTWriter struct {
	s            *splitFiles
	withThinking bool
	withImages   bool
	opt          model.Options
	tools        map[string]any // by model.Episode.ToolsKey
}

// NewSFTWriter writes DIR/<split>.parquet for each split that gets a row.
// withThinking adds the enable_thinking column; set it only when every
// episode's Conversation.EnableThinking is known (verl turns a null into
// bool(pd.NA), which raises). opt.Args says how the dataset class decodes
// arguments and is recorded nowhere else: the file always holds the text.
//
// withImages writes a data set whose model saw screenshots as verl's
// multimodal SFT rows: each image an <image> placeholder in its message's
// content, where the model saw it (after the text), and the images column
// holding them in the same order — MultiTurnSFTDataset asserts that the
// placeholders and images are as many. Without it, an episode whose
// messages hold images is refused, never written without them.
func NewSFTWriter(dir string, splits []string, withThinking, withImages bool, opt model.Options) *SFTWriter {
	return &SFTWriter{s: newSplits(dir, splits, sftFeatures(withThinking, withImages)), withThinking: withThinking, withImages: withImages,
		opt: opt.WithDefaults(), tools: map[string]any{}}
}

// ImagePlaceholder is the text that stands for one image in a verl-sft
// message's content (MultiTurnSFTDataset splits contents on it).
const ImagePlaceholder = "<image>"

// MessageValues are msgs as verl-sft's message structs, each a
// model.StructValues in the order of the message struct's fields (role,
// content, reasoning_content, tool_calls, tool_call_id), nil for a null.
func MessageValues(msgs []model.Message, opt model.Options) []any {
	out := make([]any, len(msgs))
	for i, m := range msgs {
		content := m.Content
		for range m.Images {
			content += ImagePlaceholder
		}
		v := model.StructValues{m.Role, content, nil, nil, nil}
		if m.Role == model.RoleAssistant && m.Content == "" && len(m.ToolCalls) > 0 && opt.CallContent.NullContent() {
			v[1] = nil
		}
		if m.Reasoning != "" {
			v[2] = m.Reasoning
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]any, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				calls[j] = model.StructValues{tc.ID, "function", model.StructValues{tc.Name, tc.Text}}
			}
			v[3] = calls
		}
		if m.ToolCallID != "" {
			v[4] = m.ToolCallID
		}
		out[i] = v
	}
	return out
}

// Write appends ep's conversation.
func (w *SFTWriter) Write(ep *model.Episode) error {
	msgs, err := model.Messages(ep, w.opt)
	if err != nil {
		return err
	}
	refs := model.Images(msgs)
	if len(refs) > 0 && !w.withImages {
		return &model.Refusal{Reason: "images in a text-only verl-sft file"}
	}
	tools, ok := w.tools[ep.ToolsKey()]
	if !ok {
		if t := ep.Tools(); t != nil {
			tools = string(t)
		}
		w.tools[ep.ToolsKey()] = tools
	}
	row := model.Row{
		"messages":    MessageValues(msgs, w.opt),
		"tools":       tools,
		"episode_id":  ep.Row.EpisodeID,
		"task_id":     ep.Row.TaskID,
		"group_id":    ep.GroupID(),
		"exit_reason": ep.Row.ExitReason,
		"reward":      ep.Reward(),
	}
	if w.withImages {
		images := make([]any, len(refs))
		for i, im := range refs {
			png, err := ep.Image(im.SHA256)
			if err != nil {
				return err
			}
			images[i] = png
		}
		row["images"] = images
	}
	if w.withThinking {
		if ep.Conversation.EnableThinking == nil {
			return fmt.Errorf("verl: episode %s: enable_thinking is unknown but the file has the column", ep.Row.EpisodeID)
		}
		row["enable_thinking"] = *ep.Conversation.EnableThinking
	}
	f, err := w.s.file(ep)
	if err != nil {
		return err
	}
	return w.s.append(f, row)
}

// Close finishes the files.
func (w *SFTWriter) Close() error { return w.s.close() }
