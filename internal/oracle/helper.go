package oracle

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
)

// helper is one long-lived helper process (the Python or the JavaScript
// half) speaking JSON lines: a request per line with an id, an answer per
// line naming that id. Calls are safe for concurrent use: writes are
// serialized, answers are routed to their callers by id, so callers do not
// wait on each other beyond the helper's own (sequential) work.
//
// A helper lives as long as the test binary: when the binary exits, the
// helper's stdin closes and it exits on EOF.
type helper struct {
	name  string
	stdin io.WriteCloser
	// writeMu serializes writes to stdin. It is never held together with mu:
	// a writer blocked on a full pipe must not keep the reader from
	// dispatching answers, or the helper (blocked on its own full stdout)
	// would never read again.
	writeMu sync.Mutex

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan answer
	dead    error // set once the helper's stdout closed; every later call fails with it

	stderr *tail
}

type answer struct {
	ID     int64           `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *string         `json:"error"`
}

// startHelper starts argv in dir and checks it answers a ping.
func startHelper(name, dir string, argv []string, env []string) (*helper, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("oracle: %s helper: %w", name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("oracle: %s helper: %w", name, err)
	}
	h := &helper{name: name, stdin: stdin, pending: map[int64]chan answer{}, stderr: &tail{max: 4096}}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("oracle: start %s helper (%s): %w", name, strings.Join(argv, " "), err)
	}
	go h.read(stdout, cmd)
	var ping json.RawMessage
	if err := h.call(context.Background(), "ping", nil, &ping); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *helper) read(stdout io.Reader, cmd *exec.Cmd) {
	r := bufio.NewReaderSize(stdout, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var a answer
			if jerr := json.Unmarshal(line, &a); jerr == nil {
				h.mu.Lock()
				ch := h.pending[a.ID]
				delete(h.pending, a.ID)
				h.mu.Unlock()
				if ch != nil {
					ch <- a
				}
			}
		}
		if err != nil {
			break
		}
	}
	werr := cmd.Wait()
	h.mu.Lock()
	h.dead = fmt.Errorf("oracle: %s helper exited (%v): %s", h.name, werr, strings.TrimSpace(h.stderr.String()))
	for id, ch := range h.pending {
		delete(h.pending, id)
		close(ch)
	}
	h.mu.Unlock()
}

// call sends op with params (merged into the request object) and decodes the
// result into out. A context that ends first abandons the answer, not the
// helper.
func (h *helper) call(ctx context.Context, op string, params map[string]any, out any) error {
	req := make(map[string]any, len(params)+2)
	for k, v := range params {
		req[k] = v
	}
	ch := make(chan answer, 1)
	h.mu.Lock()
	if h.dead != nil {
		h.mu.Unlock()
		return h.dead
	}
	h.nextID++
	id := h.nextID
	req["id"], req["op"] = id, op
	line, err := json.Marshal(req)
	if err != nil {
		h.mu.Unlock()
		return fmt.Errorf("oracle: %s %s: %w", h.name, op, err)
	}
	h.pending[id] = ch
	h.mu.Unlock()

	h.writeMu.Lock()
	_, err = h.stdin.Write(append(line, '\n'))
	h.writeMu.Unlock()
	if err != nil {
		h.mu.Lock()
		delete(h.pending, id)
		h.mu.Unlock()
		return fmt.Errorf("oracle: %s %s: write: %w", h.name, op, err)
	}

	select {
	case <-ctx.Done():
		h.mu.Lock()
		delete(h.pending, id)
		h.mu.Unlock()
		return ctx.Err()
	case a, ok := <-ch:
		if !ok {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.dead
		}
		if a.Error != nil {
			return &HelperError{Helper: h.name, Op: op, Message: *a.Error}
		}
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(a.Result, out); err != nil {
			return fmt.Errorf("oracle: %s %s: decode answer: %w", h.name, op, err)
		}
		return nil
	}
}

// HelperError is a failure a helper reported for one request: the template
// raised (raise_exception, a type error, an undefined attribute), the text
// could not be tokenized, and so on. The helper itself goes on serving.
type HelperError struct {
	Helper  string // "python" or "js"
	Op      string
	Message string
}

func (e *HelperError) Error() string {
	return fmt.Sprintf("oracle: %s %s: %s", e.Helper, e.Op, e.Message)
}

// IsTemplateError reports whether err is a failure the template itself
// raised while rendering (as opposed to a missing helper or a cancelled
// context): a render both implementations refuse is a property of the
// template.
func IsTemplateError(err error) bool {
	var he *HelperError
	return errors.As(err, &he) && he.Op == "render"
}

// tail keeps the last max bytes written to it (a helper's stderr, for the
// error message when it dies).
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
