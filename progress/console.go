package progress

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

// Console is a terminal stream that a progress line shares with
// everything else a command writes there (log records, notes, errors):
// the line stays the last line of the terminal, and whatever else is
// written goes above it — the line is erased first and drawn again after
// — never onto it. A Meter whose writer is a Console draws its line with
// it. It is safe for concurrent use.
type Console struct {
	mu     sync.Mutex
	w      io.Writer
	status string // the line drawn last, "" for none
	width  int    // its width on the terminal
	midway bool   // a write ended without a newline: the line waits for it
}

// NewConsole returns a Console writing to w, a terminal.
func NewConsole(w io.Writer) *Console { return &Console{w: w} }

// Write writes p above the progress line.
func (c *Console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.erase()
	n, err := c.w.Write(p)
	if len(p) > 0 {
		c.midway = p[len(p)-1] != '\n'
	}
	c.draw()
	return n, err
}

// status draws line as the progress line, in place.
func (c *Console) setStatus(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.erase()
	c.status = line
	c.draw()
}

// end draws line as the last progress line and ends it with a newline:
// what is written after goes below it.
func (c *Console) end(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.erase()
	c.status = ""
	if !c.midway {
		io.WriteString(c.w, line+"\n")
	}
}

func (c *Console) erase() {
	if c.width > 0 {
		io.WriteString(c.w, "\r"+strings.Repeat(" ", c.width)+"\r")
		c.width = 0
	}
}

func (c *Console) draw() {
	if c.status == "" || c.midway {
		return
	}
	line := c.status
	if i := bytes.IndexByte([]byte(line), '\n'); i >= 0 {
		line = line[:i]
	}
	io.WriteString(c.w, line)
	c.width = len(line)
}
