package chat

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/forkline/forkline/formats/model"
)

// lines writes one JSON Lines file per split, DIR/<split>.jsonl, created
// on the split's first line: a split that gets none has no file (an empty
// file is a split datasets cannot load).
type lines struct {
	dir   string
	known map[string]bool
	files map[string]*linesFile
	err   error
}

type linesFile struct {
	f  *os.File
	bw *bufio.Writer
	n  int64
}

func newLines(dir string, splits []string) *lines {
	l := &lines{dir: dir, known: map[string]bool{}, files: map[string]*linesFile{}}
	for _, s := range splits {
		l.known[s] = true
	}
	return l
}

// write appends one line (b plus a newline) to split's file.
func (l *lines) write(split, id string, b []byte) error {
	if l.err != nil {
		return l.err
	}
	if !l.known[split] {
		return fmt.Errorf("chat: episode %s: unknown split %q", id, split)
	}
	f, ok := l.files[split]
	if !ok {
		osf, err := os.Create(filepath.Join(l.dir, split+".jsonl"))
		if err != nil {
			l.err = fmt.Errorf("chat: %w", err)
			return l.err
		}
		f = &linesFile{f: osf, bw: bufio.NewWriterSize(osf, 256<<10)}
		l.files[split] = f
	}
	if _, err := f.bw.Write(append(b, '\n')); err != nil {
		l.err = fmt.Errorf("chat: %w", err)
		return l.err
	}
	f.n++
	return nil
}

// close flushes, syncs and closes every file. It is safe after a failed
// write; the files are then incomplete.
func (l *lines) close() error {
	var errs []error
	names := make([]string, 0, len(l.files))
	for s := range l.files {
		names = append(names, s)
	}
	slices.Sort(names)
	for _, s := range names {
		f := l.files[s]
		if err := f.bw.Flush(); err != nil {
			errs = append(errs, err)
		}
		if err := f.f.Sync(); err != nil {
			errs = append(errs, err)
		}
		if err := f.f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	l.files = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	return l.err
}

// JSONLWriter writes the chat-jsonl target: DIR/<split>.jsonl.
type JSONLWriter struct {
	opt model.Options
	out *lines
	buf []byte // the line being built (Write)
}

// NewJSONLWriter writes into dir, one file per split that gets an episode.
func NewJSONLWriter(dir string, splits []string, opt model.Options) *JSONLWriter {
	return &JSONLWriter{opt: opt.WithDefaults(), out: newLines(dir, splits)}
}

// Encode returns ep's chat-jsonl line, without the newline: {"messages":
// [...], "tools": [...], "parallel_tool_calls": bool}, every assistant
// message with a "weight" (0 for a turn marked model.Message.Failed, else
// 1), "tools" left out for a run with text tool calls, parallel_tool_calls
// true only when a turn made several calls.
//
// A run whose model saw screenshots writes each where the model saw it: as
// an image_url part with the PNG as a base64 data URL after its message's
// text, OpenAI's chat and fine-tuning form (the bytes come from the step
// rows, or from blobs/ under pixels hash).
func Encode(ep *model.Episode, opt model.Options) ([]byte, error) {
	return appendEncoded(nil, ep, opt)
}

// The weights an assistant message carries (Encode).
var (
	weightKept   = []model.Member{{Key: "weight", Value: json.RawMessage("1")}}
	weightFailed = []model.Member{{Key: "weight", Value: json.RawMessage("0")}}
)

// appendEncoded appends Encode's line to b.
func appendEncoded(b []byte, ep *model.Episode, opt model.Options) ([]byte, error) {
	msgs, err := model.Messages(ep, opt)
	if err != nil {
		return nil, err
	}
	for i := range msgs {
		for j := range msgs[i].Images {
			im := &msgs[i].Images[j]
			png, err := ep.Image(im.SHA256)
			if err != nil {
				return nil, err
			}
			im.URL = "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)
		}
	}
	b = append(b, `{"messages":[`...)
	parallel := false
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		var extra []model.Member
		if m.Role == model.RoleAssistant {
			extra = weightKept
			if m.Failed {
				extra = weightFailed
			}
		}
		parallel = parallel || len(m.ToolCalls) > 1
		b = model.AppendMessage(b, m, opt, extra...)
	}
	b = append(b, ']')
	if tools := ep.Tools(); tools != nil {
		b = append(append(b, `,"tools":`...), tools...)
	}
	b = append(b, `,"parallel_tool_calls":`...)
	b = strconv.AppendBool(b, parallel)
	return append(b, '}'), nil
}

// Write appends ep's line to its split's file.
func (w *JSONLWriter) Write(ep *model.Episode) error {
	// The line is built in a buffer kept from line to line: write copies
	// it out before the next.
	b, err := appendEncoded(w.buf[:0], ep, w.opt)
	if err != nil {
		return err
	}
	w.buf = b
	return w.out.write(ep.Split, ep.Row.EpisodeID, b)
}

// Close flushes, syncs and closes every file. It is safe to call after a
// failed Write; the files are then incomplete.
func (w *JSONLWriter) Close() error { return w.out.close() }
