// Package jsonl writes a native dataset as JSON Lines, one episode per line
// with its steps and rewards nested in step order: the quickest way to read a
// run with jq, grep or a notebook, and a lossless view of every column
// (binary columns are base64, as encoding/json writes []byte).
//
// It knows the native row types and formats/model's Episode, which carries
// them. It does not read datasets (package export streams them in) and
// imports no other target.
package jsonl

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/schemas"
)

// Episode is one output line.
type Episode struct {
	schemas.EpisodeRow
	Steps   []schemas.StepRow   `json:"step_rows"` // "steps" is the episode row's step count
	Rewards []schemas.RewardRow `json:"rewards"`
}

// Encoder writes episodes as lines, one per Encode, through a buffer: the
// lines reach the underlying writer by Flush (or when the buffer fills). It
// is the one place a line is encoded, so every writer of this format writes
// the same bytes. An Encoder is not safe for concurrent use.
type Encoder struct {
	bw  *bufio.Writer
	enc *json.Encoder
}

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder {
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &Encoder{bw: bw, enc: enc}
}

// Encode writes one episode with its steps and rewards as one line. Nil
// steps or rewards are written as empty arrays, never null.
func (e *Encoder) Encode(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
	if steps == nil {
		steps = []schemas.StepRow{}
	}
	if rewards == nil {
		rewards = []schemas.RewardRow{}
	}
	if err := e.enc.Encode(Episode{EpisodeRow: ep, Steps: steps, Rewards: rewards}); err != nil {
		return fmt.Errorf("jsonl: episode %s: %w", ep.EpisodeID, err)
	}
	return nil
}

// Flush writes the buffered lines to the underlying writer.
func (e *Encoder) Flush() error { return e.bw.Flush() }

// Writer is the jsonl export target: one line per episode written, as
// Encoder encodes it, from any number of inputs.
type Writer struct{ enc *Encoder }

// NewWriter returns a Writer writing to w; w is not closed.
func NewWriter(w io.Writer) *Writer { return &Writer{enc: NewEncoder(w)} }

// Write appends ep's line: its native rows, nothing the export derived.
func (w *Writer) Write(ep *model.Episode) error { return w.enc.Encode(ep.Row, ep.Steps, ep.Rewards) }

// Close flushes the lines; it must be called, also after a failed Write.
func (w *Writer) Close() error { return w.enc.Flush() }
