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
// differently: "retokenization drift"), no mask is guessed: the record stops
// and says so.
//
// It knows token ids only: not runtime steps, not files, not trainers.
package tokens

import "fmt"

// Turn is one model call as the server reported it.
type Turn struct {
	PromptIDs   []int32
	ResponseIDs []int32
	Logprobs    []float32 // one per response id, or empty when not requested
}

// Record is an episode's assembled token record, in verl's AgentLoopOutput
// shape: Response holds every token after the first prompt.
type Record struct {
	PromptIDs   []int32
	ResponseIDs []int32
	Mask        []int32   // 1 model token, 0 environment token
	Logprobs    []float32 // aligned with ResponseIDs; 0.0 for environment tokens; nil when any turn lacked logprobs
	Turns       int       // model turns assembled
	// Drift is set when turn DriftTurn's prompt did not extend the ids
	// before it; the record then holds the turns before DriftTurn only.
	Drift     bool
	DriftTurn int
}

// Assemble builds the record of turns in order. Turns without token ids
// (a scripted step, a server that returned none) are skipped.
func Assemble(turns []Turn) (Record, error) {
	var r Record
	haveLogprobs := true
	var seen []int32 // prompt + response ids so far, as the server saw them
	for i, t := range turns {
		if len(t.PromptIDs) == 0 && len(t.ResponseIDs) == 0 {
			continue
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
				r.Drift, r.DriftTurn = true, i
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
	if !haveLogprobs {
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
