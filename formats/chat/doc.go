// Package chat writes episodes as OpenAI/TRL chat fine-tuning JSON Lines
// (target chat-jsonl): each episode's conversation, as formats/model builds
// it (model.Messages), in OpenAI's message shape.
//
// It knows formats/model only. It does not select, split or read episodes
// (package export) and imports no other target.
//
// # chat-jsonl layout
//
//	DIR/<split>.jsonl   one conversation per line, per split (train.jsonl, ...)
//
// Each line is an OpenAI chat fine-tuning example:
// {"messages": [...], "tools": [...], "parallel_tool_calls": false}, tools
// as the run's policy offered them (model.Episode.Tools; no "tools" key for
// a run with text tool calls). Tool-call arguments are JSON-encoded strings,
// as OpenAI requires (ArgsString), or JSON objects (ArgsObject) for chat
// templates that apply tojson to them (TRL's Qwen 2.5 template). An
// assistant message with tool calls and no text has no "content" key.
// Reasoning is not written: OpenAI's format has no field for it.
package chat
