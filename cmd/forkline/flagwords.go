package main

import (
	"errors"
	"strings"

	"github.com/forkline/forkline/manifest"
)

// The libraries name what differs by the manifest's fields; the command
// names the flag that sets each one, in one spelling (-flag).

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

// inFlagWords is err as the command says it: a refused resume's
// mismatches name their flags. Everything else is err as it is.
func inFlagWords(err error) error {
	var mm *manifest.ErrResumeMismatch
	if err == nil || !errors.As(err, &mm) {
		return err
	}
	text := strings.Replace(err.Error(), mm.Error(), mm.Render(flagOf), 1)
	text = strings.Replace(text, "or collect into another directory", "or collect into another -out", 1)
	return &worded{error: err, text: text}
}

// worded is an error said otherwise, still matching what it wraps.
type worded struct {
	error
	text string
}

func (w *worded) Error() string { return w.text }
func (w *worded) Unwrap() error { return w.error }
