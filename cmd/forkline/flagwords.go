package main

import (
	"errors"
	"strings"

	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/manifest"
)

// The libraries name what they refuse by their configuration's fields (a
// fielderr.Error: "collect: Out /data/run: ...") and a refused resume's
// mismatches by the manifest's fields; the command names the flag that
// sets each one, in one spelling (-flag, never --flag). Advice that names
// flags ("use -resume to finish it") is the command's too: the libraries
// do not know the command line (internal/archtest checks that no string of
// theirs names a flag).

// fieldFlags maps one subcommand's Config (or export's Options) fields to
// the flags that set them. A field missing from the map is said by its Go
// name (TestFieldFlagsAreFields keeps each key a real field).
type fieldFlags map[string]string

var (
	collectFlags = fieldFlags{
		"Tasks": "-tasks", "Out": "-out", "Repeats": "-repeats", "Seed": "-seed", "Part": "-shard",
		"Branch": "-branch", "From": "-from", "FromEpisodes": "-episode",
		"Provider": "-provider", "ProviderParams": "-provider-opt", "Replicas": "-replicas", "Reset": "-reset",
		"Standby": "-standby", "MaxCreates": "-max-creates", "WorkDir": "-workdir",
		"Policy": "-policy", "PolicyOptions": "-policy-opt", "ScriptFile": "-script", "Capture": "-capture",
		"Resume": "-resume", "Force": "-force", "MaxLoss": "-max-loss", "Grace": "-grace", "Shell": "-shell",
	}
	serveFlags = fieldFlags{
		"Tasks": "-tasks", "Addr": "-addr", "MaxSessions": "-max-sessions", "IdleTimeout": "-idle-timeout",
		"Grace": "-grace", "MaxCheckpoints": "-max-checkpoints", "SessionCheckpoints": "-session-checkpoints",
		"MessageTimeout": "-message-timeout", "MaxMessageBytes": "-max-message-mb", "MessageBudget": "-message-budget-mb",
		"Provider": "-provider", "ProviderParams": "-provider-opt", "Reset": "-reset", "Standby": "-standby",
		"MaxCreates": "-max-creates", "WorkDir": "-workdir", "Capture": "-capture",
		"Out": "-out", "Resume": "-resume", "Force": "-force",
	}
	replayFlags = fieldFlags{
		"In": "-in", "TaskFiles": "-tasks", "Tasks": "-task", "EpisodeIDs": "-episode", "Provider": "-provider",
		"Image": "-image", "Replicas": "-replicas", "WorkDir": "-workdir", "PixelTolerance": "-pixel-tolerance",
		"Record": "-out",
	}
	exportFlags = fieldFlags{
		"Inputs": "-in", "Target": "-to", "Out": "-out", "Force": "-force",
		"Where": "-where", "MinReward": "-min-reward", "MaxReward": "-max-reward", "Tasks": "-task", "Episodes": "-episode", "Reward": "-reward",
		"Split": "-split", "Rows": "-rows", "ToolArgs": "-tool-args", "CallContent": "-call-content",
		"Reasoning": "-reasoning", "Advantage": "-advantage", "MaxPromptTokens": "-max-prompt-tokens",
		"MaxResponseTokens": "-max-response-tokens", "Pairs": "-pairs", "DPOFormat": "-dpo-format",
		"License": "-license", "TaskCategories": "-task-category", "Languages": "-language",
	}
)

// label is the flag of a field, or "" (fielderr then keeps the field's
// name).
func (f fieldFlags) label(field string) string { return f[field] }

// words says text from a library (a target's summary) with every field of
// f it names, as a whole word, said as its flag.
func (f fieldFlags) words(text string) string {
	e := &fielderr.Error{Err: errors.New(text)}
	for field := range f {
		e.Also = append(e.Also, field)
	}
	return e.Render(f.label)
}

// advice is what the command adds to a library's refusal: what to do,
// with its flags. Each entry is the error it follows and the words.
var advice = []struct {
	err  error
	text string
}{
	{collect.ErrOutputExists, "use -resume to finish it or -force to replace it"},
}

// flagOf is the flag (or the words) that sets a manifest field.
func flagOf(field string) string {
	if k, ok := strings.CutPrefix(field, "provider."); ok {
		return "-provider-opt " + k
	}
	if k, ok := strings.CutPrefix(field, "policy."); ok {
		return "-policy-opt " + k
	}
	switch field {
	case "provider", "policy", "script":
		return "-" + field
	case "plan.repeats", "plan.seed", "plan.branch", "plan.from":
		return "-" + strings.TrimPrefix(field, "plan.")
	case "plan.part":
		return "-shard"
	case "capture":
		return "capture policy (-text, -pixels, -a11y, -tokens, -capture)"
	}
	return field
}

// inFlagWords is err as the command says it: every fielderr.Error in it
// names its fields by their flags (flags: the subcommand's), a refused
// resume's mismatches name theirs, and a refusal the command has advice for
// ends with it. It still matches what it wraps (errors.Is, errors.As).
func inFlagWords(err error, flags fieldFlags) error {
	if err == nil {
		return nil
	}
	text := fielderr.Words(err, flags.label)
	var mm *manifest.ErrResumeMismatch
	if errors.As(err, &mm) {
		text = strings.Replace(text, mm.Error(), mm.Render(flagOf), 1)
		text = strings.Replace(text, "or collect into another directory", "or collect into another -out", 1)
	}
	for _, a := range advice {
		if errors.Is(err, a.err) {
			text += " (" + a.text + ")"
		}
	}
	if text == err.Error() {
		return err
	}
	return &worded{error: err, text: text}
}

// worded is an error said otherwise, still matching what it wraps.
type worded struct {
	error
	text string
}

func (w *worded) Error() string { return w.text }
func (w *worded) Unwrap() error { return w.error }
