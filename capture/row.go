package capture

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// Row converts one step of an episode into a steps-table row under p. When a
// payload is stored by hash and seen has not recorded it, Row also returns
// the blob to write; seen may be nil (every hashed payload is then returned)
// and may be shared by concurrent episodes only under the caller's lock.
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
		case PixelsFull:
			row.Screenshot = sc.PNG
		case PixelsHash:
			if seen == nil || seen.Add(row.ScreenHash) {
				blobs = append(blobs, schemas.BlobRow{SHA256: row.ScreenHash, Media: "image/png", Data: sc.PNG})
			}
		}
	}
	if p.A11y == A11yFull {
		row.AXTree = o.AXTree
	}
	if m := s.Model; m != nil {
		row.Model = optStr(m.Model)
		row.ModelText = optStr(m.RawText)
		row.Reasoning = optStr(m.Reasoning)
		if len(m.ToolCalls) > 0 {
			// runtime.ToolCall's JSON form, < > & left as they are (jq shows
			// what the model wrote); strings cannot fail to encode.
			var b strings.Builder
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(m.ToolCalls)
			calls := strings.TrimSuffix(b.String(), "\n")
			row.ToolCalls = &calls
		}
		row.FinishReason = optStr(m.FinishReason)
		row.PromptImages = m.PromptImages
		if m.Usage.PromptTokens > 0 || m.Usage.CompletionTokens > 0 {
			pt, ct := int32(m.Usage.PromptTokens), int32(m.Usage.CompletionTokens)
			row.PromptTokens, row.CompletionTokens = &pt, &ct
		}
		if m.Latency > 0 {
			ms := schemas.Millis(m.Latency)
			row.ModelMS = &ms
		}
		// Provenance is kept whatever the tokens policy: it says which
		// server and path answered, not what the ids were.
		row.TokenPath = optStr(m.Provenance.Path)
		row.TokenEndpoints = optStr(strings.Join(m.Provenance.Endpoints, ","))
		row.ChatTemplateSHA256 = optStr(m.Provenance.TemplateSHA256)
		if h := m.Harness; h != nil {
			// An agent harness's call: what it sent is the record of the
			// conversation (kept whatever the text cap: exports rebuild
			// the harness's messages from it), its tools a blob once per
			// content.
			row.HarnessInput = optStr(h.Input)
			row.HistoryCut = optStr(h.Cut)
			if len(h.Tools) > 0 {
				sum := sha256.Sum256(h.Tools)
				hash := hex.EncodeToString(sum[:])
				row.ToolsSHA256 = &hash
				if seen == nil || seen.Add(hash) {
					blobs = append(blobs, schemas.BlobRow{SHA256: hash, Media: schemas.MediaJSON, Data: h.Tools})
				}
			}
		}
		if p.Tokens == TokensKeep {
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

// Start keeps an episode's first observation (runtime.History.Start) in
// its episode row under p, as Row keeps a step's: the screenshot's bytes
// in the row (pixels full), in a blob (pixels hash, when seen has not
// recorded it, returned to be written) or only its hash (pixels none), the
// tree when a11y is kept, the text capped as an output is.
func (p Policy) Start(ep *schemas.EpisodeRow, o runtime.Observation, seen BlobIndex) []schemas.BlobRow {
	out := o.Output
	if p.TextCap > 0 && len(out) > p.TextCap {
		out = headTail(out, p.TextCap)
	}
	text := strings.ToValidUTF8(string(out), "\uFFFD")
	ep.StartOutput = &text
	var blobs []schemas.BlobRow
	if sc := o.Screenshot; sc != nil && len(sc.PNG) > 0 {
		sum := sha256.Sum256(sc.PNG)
		h := hex.EncodeToString(sum[:])
		ep.StartScreenHash = &h
		ep.StartScreenW, ep.StartScreenH = int32(sc.Width), int32(sc.Height)
		switch p.Pixels {
		case PixelsFull:
			ep.StartScreenshot = sc.PNG
		case PixelsHash:
			if seen == nil || seen.Add(h) {
				blobs = append(blobs, schemas.BlobRow{SHA256: h, Media: "image/png", Data: sc.PNG})
			}
		}
	}
	if p.A11y == A11yFull && o.AXTree != "" {
		tree := o.AXTree
		ep.StartAXTree = &tree
	}
	return blobs
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
