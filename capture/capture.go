// Package capture owns the capture policy — what each step keeps of its
// text, pixels, accessibility tree and tokens — and turns runtime steps into
// rows of the native steps table, with content-addressed blobs for payloads
// stored by hash.
//
// It knows runtime steps and schemas rows. It does not know where rows go
// (formats/shard), how they were produced (providers, policies) or what tasks
// or rewards are.
package capture

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// Policy says what each step keeps. The zero value is not valid; start from
// DefaultPolicy.
type Policy struct {
	// TextCap is the most bytes of an observation's output kept in the steps
	// table; 0 keeps everything. A capped output keeps its head and tail with
	// an explicit marker between.
	TextCap int `json:"text_cap"`
	// Pixels: "full" keeps PNG bytes in the step row, "hash" stores each
	// distinct PNG once in the blobs table and keeps its sha256 in the step,
	// "none" keeps neither (size and hash are still recorded).
	Pixels string `json:"pixels"`
	// A11y: "full" keeps the accessibility tree, "none" drops it.
	A11y string `json:"a11y"`
	// Tokens: "keep" records token ids, masks and logprobs, "drop" leaves the
	// token columns empty.
	Tokens string `json:"tokens"`
}

// DefaultPolicy keeps text whole, pixels by hash (identical screenshots from
// forked replicas are stored once), accessibility trees and tokens.
func DefaultPolicy() Policy {
	return Policy{TextCap: 0, Pixels: "hash", A11y: "full", Tokens: "keep"}
}

// Validate reports a policy field with a value it does not know.
func (p Policy) Validate() error {
	check := func(field, v string, known ...string) error {
		for _, k := range known {
			if v == k {
				return nil
			}
		}
		return fmt.Errorf("capture: %s %q is not known (known: %s)", field, v, strings.Join(known, ", "))
	}
	if p.TextCap < 0 {
		return fmt.Errorf("capture: text cap %d is negative", p.TextCap)
	}
	if err := check("pixels", p.Pixels, "full", "hash", "none"); err != nil {
		return err
	}
	if err := check("a11y", p.A11y, "full", "none"); err != nil {
		return err
	}
	return check("tokens", p.Tokens, "keep", "drop")
}

// ParseText reads the -text flag: "full" or "cap:N".
func ParseText(s string) (int, error) {
	if s == "full" {
		return 0, nil
	}
	if n, ok := strings.CutPrefix(s, "cap:"); ok {
		v, err := strconv.Atoi(n)
		if err == nil && v > 0 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("capture: text %q is not known (known: full, cap:N with N > 0 bytes)", s)
}

// TextFlag is the inverse of ParseText.
func (p Policy) TextFlag() string {
	if p.TextCap == 0 {
		return "full"
	}
	return fmt.Sprintf("cap:%d", p.TextCap)
}

// Stats counts what a Recorder kept, for the run summary.
type Stats struct {
	Steps           int64
	StepBytes       int64 // bytes of payload kept in step rows (output, pixels, trees, tokens)
	Screenshots     int64 // steps that carried a screenshot
	BlobsStored     int64 // distinct blobs written
	BlobBytes       int64
	BlobsDeduped    int64 // screenshots that reused an already-stored blob
	TextTruncations int64 // outputs cut by TextCap
}

// Row converts one step of an episode into a steps-table row under p. When a
// payload is stored by hash and the store has not seen it, Row also returns
// the blob to write; seen records hashes already written (it may be shared by
// concurrent episodes only under the caller's lock).
func (p Policy) Row(episodeID, taskID string, s runtime.Step, seen BlobIndex) (schemas.StepRow, []schemas.BlobRow) {
	o := s.Observation
	row := schemas.StepRow{
		EpisodeID:   episodeID,
		StepIndex:   int32(s.Index),
		TaskID:      taskID,
		StartedAt:   s.Started.UnixMilli(),
		ActionKind:  string(s.Action.Kind),
		ActionJSON:  s.Action.String(),
		OutputBytes: o.OutputBytes,
		Truncated:   o.Truncated,
		ExitCode:    int32(o.ExitCode),
		IsError:     o.Error,
		ErrorKind:   string(o.ErrorKind),
		TimedOut:    o.TimedOut,
		PolicyMS:    schemas.Millis(s.PolicyTime),
		EnvMS:       schemas.Millis(s.EnvTime),
	}
	if s.Action.Kind == "" {
		row.ActionJSON = "null"
	}
	out := o.Output
	if p.TextCap > 0 && len(out) > p.TextCap {
		out = headTail(out, p.TextCap)
		row.Truncated = true
	}
	if row.OutputBytes < int64(len(o.Output)) {
		row.OutputBytes = int64(len(o.Output))
	}
	if utf8.Valid(out) {
		row.Output = string(out)
	} else {
		row.Output = strings.ToValidUTF8(string(out), "\uFFFD")
		row.OutputRaw = append([]byte(nil), out...)
	}
	var blobs []schemas.BlobRow
	if sc := o.Screenshot; sc != nil && len(sc.PNG) > 0 {
		sum := sha256.Sum256(sc.PNG)
		row.ScreenHash = hex.EncodeToString(sum[:])
		row.ScreenW, row.ScreenH = int32(sc.Width), int32(sc.Height)
		switch p.Pixels {
		case "full":
			row.Screenshot = sc.PNG
		case "hash":
			if seen == nil || seen.Add(row.ScreenHash) {
				blobs = append(blobs, schemas.BlobRow{SHA256: row.ScreenHash, Media: "image/png", Data: sc.PNG})
			}
		}
	}
	if p.A11y == "full" {
		row.AXTree = o.AXTree
	}
	if m := s.Model; m != nil {
		row.Model = optStr(m.Model)
		row.ModelText = optStr(m.RawText)
		row.Reasoning = optStr(m.Reasoning)
		row.FinishReason = optStr(m.FinishReason)
		if m.Usage.PromptTokens > 0 || m.Usage.CompletionTokens > 0 {
			pt, ct := int32(m.Usage.PromptTokens), int32(m.Usage.CompletionTokens)
			row.PromptTokens, row.CompletionTokens = &pt, &ct
		}
		if m.Latency > 0 {
			ms := schemas.Millis(m.Latency)
			row.ModelMS = &ms
		}
		if p.Tokens == "keep" {
			row.PromptIDs = m.PromptIDs
			row.ResponseIDs = m.ResponseIDs
			row.ResponseLogprobs = m.Logprobs
			if len(m.ResponseMask) > 0 {
				row.ResponseMask = make([]int32, len(m.ResponseMask))
				for i, v := range m.ResponseMask {
					row.ResponseMask[i] = int32(v)
				}
			}
		}
	}
	return row, blobs
}

// RowBytes estimates the payload bytes a row keeps, for Stats.
func RowBytes(r schemas.StepRow) int64 {
	n := len(r.Output) + len(r.OutputRaw) + len(r.Screenshot) + len(r.AXTree) + len(r.ActionJSON)
	n += 4 * (len(r.PromptIDs) + len(r.ResponseIDs) + len(r.ResponseMask) + len(r.ResponseLogprobs))
	for _, s := range []*string{r.ModelText, r.Reasoning} {
		if s != nil {
			n += len(*s)
		}
	}
	return int64(n)
}

func optStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// headTail keeps the first and last halves of b within limit bytes and marks
// the cut, never splitting a UTF-8 sequence at the seams.
func headTail(b []byte, limit int) []byte {
	dropped := len(b) - limit
	marker := fmt.Sprintf("\n[... forkline: %d bytes elided by the capture policy ...]\n", dropped)
	h := limit - limit/2
	t := limit / 2
	for h > 0 && !utf8.RuneStart(b[h]) {
		h--
	}
	start := len(b) - t
	for start < len(b) && !utf8.RuneStart(b[start]) {
		start++
	}
	out := make([]byte, 0, limit+len(marker))
	out = append(out, b[:h]...)
	out = append(out, marker...)
	return append(out, b[start:]...)
}

// BlobIndex remembers which blob hashes were already stored. Add reports
// whether h is new (and records it).
type BlobIndex interface {
	Add(h string) bool
}

// SetIndex is an in-memory BlobIndex. It grows with the number of distinct
// blobs (64 bytes each), not with the number of steps.
type SetIndex map[string]struct{}

// Add records h and reports whether it was new.
func (s SetIndex) Add(h string) bool {
	if _, ok := s[h]; ok {
		return false
	}
	s[h] = struct{}{}
	return true
}

// MarshalManifest is the policy as it is recorded in a dataset manifest.
func (p Policy) MarshalManifest() json.RawMessage {
	b, _ := json.Marshal(struct {
		Text   string `json:"text"`
		Pixels string `json:"pixels"`
		A11y   string `json:"a11y"`
		Tokens string `json:"tokens"`
	}{p.TextFlag(), p.Pixels, p.A11y, p.Tokens})
	return b
}
