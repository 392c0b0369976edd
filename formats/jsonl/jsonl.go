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
	"fmt"
	"io"

	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/schemas"
)

// Episode is one output line: the line is the bytes encoding/json writes
// for it with HTML escaping off, appended by hand (encode.go) and checked
// against encoding/json by the tests.
type Episode struct {
	schemas.EpisodeRow
	Steps   []schemas.StepRow   `json:"step_rows"` // "steps" is the episode row's step count
	Rewards []schemas.RewardRow `json:"rewards"`
}

// Encoder writes episodes as lines, one per Encode, through a buffer: the
// lines reach the underlying writer by Flush (or when the buffer fills). It
// is the one place a line is encoded, so every writer of this format writes
// the same bytes: those encoding/json writes for an Episode with HTML
// escaping off, appended by hand (encode.go) without reflection. An Encoder
// is not safe for concurrent use.
type Encoder struct {
	w   io.Writer
	buf []byte // lines not yet written to w
	err error  // the first write error; every later Encode and Flush returns it
}

// flushAt is the buffered size at which Encode writes the lines out.
const flushAt = 256 << 10

// keepAt bounds the buffer kept after a flush: one kept after an episode
// larger than that (screenshots) is dropped.
const keepAt = 8 << 20

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder {
	return &Encoder{w: w, buf: make([]byte, 0, flushAt+flushAt/4)}
}

// Encode writes one episode with its steps and rewards as one line. Nil
// steps or rewards are written as empty arrays, never null. A float JSON
// cannot hold (NaN, an infinity) refuses the episode: nothing of it is
// written, and the error names the episode and the field.
func (e *Encoder) Encode(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
	if e.err != nil {
		return fmt.Errorf("jsonl: episode %s: %w", ep.EpisodeID, e.err)
	}
	n := len(e.buf)
	b, err := appendLine(e.buf, &ep, steps, rewards)
	if err != nil {
		e.buf = b[:n]
		return fmt.Errorf("jsonl: episode %s: %w", ep.EpisodeID, err)
	}
	e.buf = b
	if len(b) >= flushAt {
		if err := e.Flush(); err != nil {
			return fmt.Errorf("jsonl: episode %s: %w", ep.EpisodeID, err)
		}
	}
	return nil
}

// Flush writes the buffered lines to the underlying writer.
func (e *Encoder) Flush() error {
	if e.err != nil {
		return e.err
	}
	if len(e.buf) == 0 {
		return nil
	}
	n, err := e.w.Write(e.buf)
	if err == nil && n < len(e.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		e.err = err
		return err
	}
	if cap(e.buf) > keepAt {
		e.buf = make([]byte, 0, flushAt+flushAt/4)
	} else {
		e.buf = e.buf[:0]
	}
	return nil
}

// Writer is the jsonl export target: one line per episode written, as
// Encoder encodes it, from any number of inputs.
type Writer struct{ enc *Encoder }

// NewWriter returns a Writer writing to w; w is not closed.
func NewWriter(w io.Writer) *Writer { return &Writer{enc: NewEncoder(w)} }

// Write appends ep's line: its native rows, nothing the export derived.
func (w *Writer) Write(ep *model.Episode) error { return w.enc.Encode(ep.Row, ep.Steps, ep.Rewards) }

// Close flushes the lines; it must be called, also after a failed Write.
func (w *Writer) Close() error { return w.enc.Flush() }
