package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/forkline/forkline/fielderr"

	"github.com/forkline/forkline/formats/model"
)

// DPOFormat is the line shape of the dpo target.
type DPOFormat string

// The formats.
const (
	// DPOTRL is TRL's conversational preference format: {"prompt":
	// [messages], "chosen": [one assistant message], "rejected": [one],
	// "tools": [...]}. DPOTrainer renders prompt with a generation prompt
	// and prompt+chosen, prompt+rejected whole, passing tools to the
	// template (trl/trainer/dpo_trainer.py tokenize_fn).
	DPOTRL DPOFormat = "trl"
	// DPOOpenAI is OpenAI's preference fine-tuning format: {"input":
	// {"messages", "tools", "parallel_tool_calls"}, "preferred_output":
	// [one assistant message], "non_preferred_output": [one]} (OpenAI's
	// direct preference optimization guide).
	DPOOpenAI DPOFormat = "openai"
)

// ParseDPOFormat reads -dpo-format.
func ParseDPOFormat(s string) (DPOFormat, error) {
	switch DPOFormat(s) {
	case DPOTRL, DPOOpenAI:
		return DPOFormat(s), nil
	}
	return "", fielderr.Sentence("chat", "DPOFormat", strconv.Quote(s), "(known: trl, openai)")
}

// Conversation is what a preference pair needs of one episode, copied out
// of it so that it can be held until its partner is read.
type Conversation struct {
	EpisodeID string
	Reward    float64
	Messages  []model.Message
	Tools     json.RawMessage // nil for text tool calls
}

// NewConversation builds ep's Conversation (its reward must be known).
func NewConversation(ep *model.Episode, reward float64, opt model.Options) (*Conversation, error) {
	msgs, err := model.Messages(ep, opt)
	if err != nil {
		return nil, err
	}
	return &Conversation{EpisodeID: ep.Row.EpisodeID, Reward: reward, Messages: msgs, Tools: ep.Tools()}, nil
}

// Pair is one preference pair of a group.
type Pair struct {
	GroupID          string
	Split            string
	Chosen, Rejected *Conversation
}

// The pairing rule's shared prompt. Both conversations start with the same
// system and user messages (a group shares its prompt); the prompt of the
// pair is their longest common prefix — identical turns both episodes took
// stay in the prompt — and chosen and rejected are the model's message at
// the first turn where it acted differently. Call ids are not compared:
// servers name calls anew in every episode.
//
// Why one message and not the rest of each episode: TRL's DPOTrainer gives
// every token of chosen and rejected to the loss (its collator's
// completion_mask is 1 over the whole completion), so a multi-turn
// completion would train the model on the tool results inside it — the
// environment's output, which differs between the two sides by
// construction. The message at the divergence is what the model chose; its
// consequence is the reward. OpenAI's format takes one message per side
// anyway.
//
// When the first difference is an observation (the same call answered
// differently, a non-deterministic environment), the two prompts differ
// before the model's choices do: there is no pair with a shared prompt.

// PromptLen returns the length of the pair's shared prompt, and false when
// the pair has nothing to prefer: identical conversations, or ones whose
// first difference is not a model message in both.
func (p *Pair) PromptLen() (int, bool) {
	a, b := p.Chosen.Messages, p.Rejected.Messages
	k := 0
	for k < len(a) && k < len(b) && sameMessage(a[k], b[k]) {
		k++
	}
	if k == 0 || k >= len(a) || k >= len(b) || a[k].Role != model.RoleAssistant || b[k].Role != model.RoleAssistant {
		return 0, false
	}
	return k, true
}

// sameMessage compares two messages as a template sees them, call ids
// aside.
func sameMessage(a, b model.Message) bool {
	if a.Role != b.Role || a.Content != b.Content || a.Reasoning != b.Reasoning || len(a.ToolCalls) != len(b.ToolCalls) {
		return false
	}
	for i := range a.ToolCalls {
		if a.ToolCalls[i].Name != b.ToolCalls[i].Name || !bytes.Equal(a.ToolCalls[i].Arguments, b.ToolCalls[i].Arguments) {
			return false
		}
	}
	return true
}

// EncodePair returns the pair's line (without the newline), and false when
// PromptLen finds nothing to prefer. TRL lines also carry group_id and the
// two episodes' ids and rewards (TRL drops columns it does not use); OpenAI
// lines hold only what OpenAI's format has, with string arguments, as it
// requires.
func EncodePair(p *Pair, format DPOFormat, opt model.Options) ([]byte, bool) {
	k, ok := p.PromptLen()
	if !ok {
		return nil, false
	}
	msgs := func(ms []model.Message) json.RawMessage { return model.EncodeMessages(ms, opt) }
	var b bytes.Buffer
	if format == DPOOpenAI {
		// OpenAI's messages have no reasoning field.
		opt.Args = model.ArgsString
		msgs = func(ms []model.Message) json.RawMessage {
			plain := make([]model.Message, len(ms))
			for i, m := range ms {
				m.Reasoning = ""
				plain[i] = m
			}
			return model.EncodeMessages(plain, opt)
		}
		b.WriteString(`{"input":{"messages":`)
		b.Write(msgs(p.Chosen.Messages[:k]))
		if p.Chosen.Tools != nil {
			b.WriteString(`,"tools":`)
			b.Write(p.Chosen.Tools)
		}
		b.WriteString(`,"parallel_tool_calls":false},"preferred_output":`)
		b.Write(msgs(p.Chosen.Messages[k : k+1]))
		b.WriteString(`,"non_preferred_output":`)
		b.Write(msgs(p.Rejected.Messages[k : k+1]))
		b.WriteByte('}')
		return b.Bytes(), true
	}
	b.WriteString(`{"prompt":`)
	b.Write(msgs(p.Chosen.Messages[:k]))
	b.WriteString(`,"chosen":`)
	b.Write(msgs(p.Chosen.Messages[k : k+1]))
	b.WriteString(`,"rejected":`)
	b.Write(msgs(p.Rejected.Messages[k : k+1]))
	if p.Chosen.Tools != nil {
		b.WriteString(`,"tools":`)
		b.Write(p.Chosen.Tools)
	}
	fmt.Fprintf(&b, `,"group_id":%s,"chosen_episode_id":%s,"rejected_episode_id":%s,"chosen_reward":%s,"rejected_reward":%s}`,
		quote(p.GroupID), quote(p.Chosen.EpisodeID), quote(p.Rejected.EpisodeID), number(p.Chosen.Reward), number(p.Rejected.Reward))
	return b.Bytes(), true
}

func quote(s string) string { b, _ := model.EncodeJSON(s); return string(b) }

func number(f float64) string { b, _ := json.Marshal(f); return string(b) }

// DPOWriter writes the dpo target: DIR/<split>.jsonl, one pair per line.
type DPOWriter struct {
	format DPOFormat
	opt    model.Options
	out    *lines
}

// NewDPOWriter writes into dir, one file per split that gets a pair.
func NewDPOWriter(dir string, splits []string, format DPOFormat, opt model.Options) *DPOWriter {
	if format == "" {
		format = DPOTRL
	}
	return &DPOWriter{format: format, opt: opt.WithDefaults(), out: newLines(dir, splits)}
}

// WritePair writes p's line; it returns false, writing nothing, for a pair
// with nothing to prefer (see PromptLen).
func (w *DPOWriter) WritePair(p *Pair) (bool, error) {
	b, ok := EncodePair(p, w.format, w.opt)
	if !ok {
		return false, nil
	}
	return true, w.out.write(p.Split, p.Chosen.EpisodeID, b)
}

// Close flushes, syncs and closes every file.
func (w *DPOWriter) Close() error { return w.out.close() }
