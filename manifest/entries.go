package manifest

import (
	"encoding/json"
	"fmt"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
)

// Entries are a manifest's entries, decoded by their owning types. An entry
// the manifest does not hold is nil (Capture then reads as the default
// capture policy, under which a dataset without one was collected).
type Entries struct {
	Provider *Provider
	Policy   *Policy
	Plan     *Plan
	Capture  capture.Policy
	Summary  *Summary
}

// EntryError is an entry of a manifest that its owning type cannot read.
type EntryError struct {
	Entry string // "provider", "policy", "plan", "capture" or "summary"
	Err   error
}

func (e *EntryError) Error() string { return fmt.Sprintf("%s: %v", e.Entry, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

// Read decodes m's entries. Every entry that cannot be read is an
// *EntryError among the problems; the others are decoded whatever the
// problems, so a reader can say everything that is wrong at once. These are
// the decoders every reader uses: inspect, export, verify, replay, merge
// and a resume read the same entry the same way.
func Read(m shard.Manifest) (Entries, []error) {
	var e Entries
	var problems []error
	bad := func(entry string, err error) { problems = append(problems, &EntryError{Entry: entry, Err: err}) }
	if present(m.Provider) {
		if p, err := DecodeProvider(m.Provider); err != nil {
			bad("provider", err)
		} else {
			e.Provider = &p
		}
	}
	if present(m.Policy) {
		p, err := DecodePolicy(m.Policy)
		if err == nil {
			_, err = p.Shown() // the conversation exporters rebuild must read too
		}
		if err != nil {
			bad("policy", err)
		} else {
			e.Policy = &p
		}
	}
	if present(m.Plan) {
		if p, err := DecodePlan(m.Plan); err != nil {
			bad("plan", err)
		} else {
			e.Plan = &p
		}
	}
	capt, err := capture.DecodeManifest(m.Capture)
	if err != nil {
		bad("capture", err)
	}
	e.Capture = capt
	if present(m.Summary) {
		if s, err := DecodeSummary(m.Summary); err != nil {
			bad("summary", err)
		} else {
			e.Summary = &s
		}
	}
	return e, problems
}

// present reports whether an entry is there: not absent, empty or null.
func present(raw json.RawMessage) bool { return len(raw) > 0 && !isNull(raw) }
