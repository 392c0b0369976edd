package verl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/export/model"
)

// SFTFeatures returns the verl-sft columns. The tool-call arguments struct
// and the tool parameters' properties struct hold the union of every
// action's fields (sorted by name), typed from aci. withThinking adds the
// enable_thinking column.
func SFTFeatures(withThinking bool) model.Features {
	names := actionFieldNames()
	args := make(model.Struct, len(names))
	props := make(model.Struct, len(names))
	prop := model.Struct{{Name: "type", Type: str}, {Name: "description", Type: str}, {Name: "enum", Type: model.List{Item: str}}}
	for i, n := range names {
		typ, _ := aci.FieldType(n)
		var v model.Feature = str
		if typ == "integer" {
			v = i64
		}
		args[i] = model.Field{Name: n, Type: v}
		props[i] = model.Field{Name: n, Type: prop}
	}
	message := model.Struct{
		{Name: "role", Type: str},
		{Name: "content", Type: str},
		{Name: "reasoning_content", Type: str},
		{Name: "tool_calls", Type: model.List{Item: model.Struct{
			{Name: "id", Type: str},
			{Name: "type", Type: str},
			{Name: "function", Type: model.Struct{{Name: "name", Type: str}, {Name: "arguments", Type: args}}},
		}}},
		{Name: "tool_call_id", Type: str},
	}
	tool := model.Struct{
		{Name: "type", Type: str},
		{Name: "function", Type: model.Struct{
			{Name: "name", Type: str},
			{Name: "description", Type: str},
			{Name: "parameters", Type: model.Struct{
				{Name: "type", Type: str},
				{Name: "properties", Type: props},
				{Name: "required", Type: model.List{Item: str}},
				{Name: "additionalProperties", Type: bl},
			}},
		}},
	}
	fs := model.Features{
		{Name: "messages", Type: model.List{Item: message}},
		{Name: "tools", Type: model.List{Item: tool}},
	}
	if withThinking {
		fs = append(fs, model.Field{Name: "enable_thinking", Type: bl})
	}
	return append(fs,
		model.Field{Name: "episode_id", Type: str},
		model.Field{Name: "task_id", Type: str},
		model.Field{Name: "exit_reason", Type: str},
		model.Field{Name: "reward", Type: f64},
	)
}

// actionFieldNames is every field of every tool, sorted.
func actionFieldNames() []string {
	var names []string
	for _, t := range aci.ToolSchemas() {
		props := t["function"].(map[string]any)["parameters"].(map[string]any)["properties"].(map[string]any)
		for n := range props {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return slices.Compact(names)
}

// SFTWriter writes verl-sft.
type SFTWriter struct {
	s            *splitFiles
	withThinking bool
	tools        map[string][]any // by model.Episode.ToolsKey
}

// NewSFTWriter creates DIR/<split>.parquet for each split. withThinking
// adds the enable_thinking column; set it only when every episode's
// Conversation.EnableThinking is known (a null would reach verl as None).
func NewSFTWriter(dir string, splits []string, withThinking bool) (*SFTWriter, error) {
	s, err := openSplits(dir, splits, SFTFeatures(withThinking))
	if err != nil {
		return nil, err
	}
	return &SFTWriter{s: s, withThinking: withThinking, tools: map[string][]any{}}, nil
}

// Write appends ep's conversation.
func (w *SFTWriter) Write(ep *model.Episode) error {
	f, err := w.s.file(ep)
	if err != nil {
		return err
	}
	msgs, err := model.Messages(ep)
	if err != nil {
		return err
	}
	values, err := model.MessageValuesWith(msgs, func(raw json.RawMessage) (any, error) { return argumentValues(raw) })
	if err != nil {
		return fmt.Errorf("verl: episode %s: %w", ep.Row.EpisodeID, err)
	}
	tools, ok := w.tools[ep.ToolsKey()]
	if !ok {
		tools = []any{} // text tool calls: the model saw no function tools
		for _, t := range ep.Tools() {
			tools = append(tools, t)
		}
		w.tools[ep.ToolsKey()] = tools
	}
	row := model.Row{
		"messages":    values,
		"tools":       tools,
		"episode_id":  ep.Row.EpisodeID,
		"task_id":     ep.Row.TaskID,
		"exit_reason": ep.Row.ExitReason,
		"reward":      ep.Reward(),
	}
	if w.withThinking {
		if ep.Conversation.EnableThinking == nil {
			return fmt.Errorf("verl: episode %s: enable_thinking is unknown but the file has the column", ep.Row.EpisodeID)
		}
		row["enable_thinking"] = *ep.Conversation.EnableThinking
	}
	return w.s.append(f, row)
}

// Close finishes the files.
func (w *SFTWriter) Close() error { return w.s.close() }

// argumentValues decodes tool-call arguments into struct values: integers
// as int64, everything else as decoded.
func argumentValues(raw json.RawMessage) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	for k, v := range m {
		if n, ok := v.(json.Number); ok {
			i, err := n.Int64()
			if err != nil {
				return nil, fmt.Errorf("argument %s: %v is not an integer", k, n)
			}
			m[k] = i
		}
	}
	return m, nil
}
