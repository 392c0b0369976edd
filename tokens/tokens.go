// Package tokens assembles an episode's token record — the one sequence RL
// trainers consume — from the token ids an inference server reported turn by
// turn, without a tokenizer.
//
// Turn k's prompt ids already contain everything before it, as the server
// tokenized it. The tokens the environment contributed between turn k and
// turn k+1 (tool output, the chat template's turn markers) are therefore the
// part of prompt k+1 that extends prompt k + response k. They get mask 0 and
// logprob 0.0; model tokens get mask 1 and the server's logprobs. When a later
// prompt does not extend the earlier ids (the template re-rendered history
// differently: "retokenization drift"), or a model turn came back without its
// ids (what it generated is then unknown, and would otherwise be swallowed
// into the next prompt as environment tokens), no mask is guessed: the
// record stops before that turn and says why.
//
// The check is the same whichever way the ids were obtained. A policy that
// sends token ids itself (token in, token out) builds each prompt as the
// previous prompt, its response and the new turn's ids, so its records pass
// by construction; Assemble verifies that rather than trusting it.
//
// It knows token ids only: not runtime steps, not files, not trainers.
package tokens

import "fmt"

// Turn is one model call as the server reported it. A model turn without
// prompt or response ids is kept as a Turn with them empty: it cuts the
// record (CutMissingIDs).
type Turn struct {
	PromptIDs   []int32
	ResponseIDs []int32
	Logprobs    []float32 // one per response id, or empty when not requested
	// Cut, when set on a turn after the first, ends the record before it
	// for the reason it names: the caller knows the turn does not continue
	// the ones before (an agent harness rewrote its history), whatever
	// its ids say.
	Cut string
}

// Missing reports whether the turn lacks the ids a record needs.
func (t Turn) Missing() bool { return len(t.PromptIDs) == 0 || len(t.ResponseIDs) == 0 }

// Why a record was cut (Record.Cut).
const (
	// CutDrift: the turn's prompt did not extend the ids before it.
	CutDrift = "drift"
	// CutMissingIDs: the turn came back without token ids.
	CutMissingIDs = "missing_ids"
)

// Record is an episode's assembled token record, in verl's AgentLoopOutput
// shape: Response holds every token after the first prompt.
type Record struct {
	PromptIDs   []int32
	ResponseIDs []int32
	Mask        []int32   // 1 model token, 0 environment token
	Logprobs    []float32 // aligned with ResponseIDs; 0.0 for environment tokens; nil when any turn lacked logprobs
	Turns       int       // model turns assembled
	// Drift is set when the record was cut before turn DriftTurn, Cut
	// saying why (CutDrift or CutMissingIDs); the record then holds the
	// turns before DriftTurn only.
	Drift     bool
	DriftTurn int
	Cut       string
}

// Assemble builds the record of an episode's model turns, in order. When no
// turn has ids (a server that reports none, or none were asked for) the
// record is empty and not cut; otherwise the first turn that lacks them, or
// whose prompt does not extend the ids before it, cuts the record there.
func Assemble(turns []Turn) (Record, error) {
	var r Record
	anyIDs := false
	for _, t := range turns {
		anyIDs = anyIDs || !t.Missing()
	}
	if !anyIDs {
		return r, nil
	}
	haveLogprobs := true
	var seen []int32 // prompt + response ids so far, as the server saw them
	for i, t := range turns {
		if t.Cut != "" && r.Turns > 0 {
			r.Drift, r.DriftTurn, r.Cut = true, i, t.Cut
			break
		}
		if t.Missing() {
			r.Drift, r.DriftTurn, r.Cut = true, i, CutMissingIDs
			break
		}
		if len(t.Logprobs) != 0 && len(t.Logprobs) != len(t.ResponseIDs) {
			return r, fmt.Errorf("tokens: turn %d has %d logprobs for %d response ids", i, len(t.Logprobs), len(t.ResponseIDs))
		}
		if len(t.Logprobs) == 0 {
			haveLogprobs = false
		}
		if r.Turns == 0 {
			r.PromptIDs = append([]int32(nil), t.PromptIDs...)
			seen = append(seen, t.PromptIDs...)
		} else {
			if !HasPrefix(t.PromptIDs, seen) {
				r.Drift, r.DriftTurn, r.Cut = true, i, CutDrift
				break
			}
			env := t.PromptIDs[len(seen):]
			r.ResponseIDs = append(r.ResponseIDs, env...)
			for range env {
				r.Mask = append(r.Mask, 0)
				r.Logprobs = append(r.Logprobs, 0)
			}
			seen = append(seen, env...)
		}
		r.ResponseIDs = append(r.ResponseIDs, t.ResponseIDs...)
		for j := range t.ResponseIDs {
			r.Mask = append(r.Mask, 1)
			if j < len(t.Logprobs) {
				r.Logprobs = append(r.Logprobs, t.Logprobs[j])
			} else {
				r.Logprobs = append(r.Logprobs, 0)
			}
		}
		seen = append(seen, t.ResponseIDs...)
		r.Turns++
	}
	if !haveLogprobs || r.Turns == 0 {
		r.Logprobs = nil
	}
	return r, nil
}

// HasPrefix reports whether s starts with prefix.
func HasPrefix(s, prefix []int32) bool {
	if len(prefix) > len(s) {
		return false
	}
	for i := range prefix {
		if s[i] != prefix[i] {
			return false
		}
	}
	return true
}

// Check verifies a record's invariants: mask and ids have equal length,
// logprobs too when present, mask values are 0 or 1.
func (r Record) Check() error {
	if len(r.Mask) != len(r.ResponseIDs) {
		return fmt.Errorf("tokens: %d mask values for %d response ids", len(r.Mask), len(r.ResponseIDs))
	}
	if r.Logprobs != nil && len(r.Logprobs) != len(r.ResponseIDs) {
		return fmt.Errorf("tokens: %d logprobs for %d response ids", len(r.Logprobs), len(r.ResponseIDs))
	}
	for i, m := range r.Mask {
		if m != 0 && m != 1 {
			return fmt.Errorf("tokens: mask[%d] = %d, want 0 or 1", i, m)
		}
	}
	return nil
}
