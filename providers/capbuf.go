package providers

import (
	"fmt"
	"sync"
)

// CapBuffer is an io.Writer that keeps at most Cap bytes of what is written:
// the first half and the last half, so both a command's start and its final
// error survive. It never fails a write, so a chatty command is never blocked
// or killed by the cap. Safe for concurrent writers.
type CapBuffer struct {
	Cap int

	mu    sync.Mutex
	head  []byte
	tail  []byte // ring of the last Cap-len(head) bytes once head is full
	start int    // ring start within tail
	total int64
}

// NewCapBuffer returns a buffer keeping at most limit bytes (DefaultOutputCap
// when limit <= 0).
func NewCapBuffer(limit int) *CapBuffer {
	if limit <= 0 {
		limit = DefaultOutputCap
	}
	return &CapBuffer{Cap: limit}
}

// Write records p.
func (b *CapBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	headCap := b.Cap - b.Cap/2
	if room := headCap - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	tailCap := b.Cap / 2
	if tailCap == 0 || len(p) == 0 {
		return n, nil
	}
	if len(p) >= tailCap {
		b.tail = append(b.tail[:0], p[len(p)-tailCap:]...)
		b.start = 0
		return n, nil
	}
	for len(p) > 0 {
		if len(b.tail) < tailCap {
			k := min(tailCap-len(b.tail), len(p))
			b.tail = append(b.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(b.tail[b.start:], p)
		p = p[k:]
		b.start = (b.start + k) % tailCap
	}
	return n, nil
}

// Total returns how many bytes were written in all.
func (b *CapBuffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Truncated reports whether anything was dropped.
func (b *CapBuffer) Truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total > int64(len(b.head)+len(b.tail))
}

// Bytes returns what was kept. When bytes were dropped, an explicit marker
// between head and tail says how many, so nobody mistakes the result for the
// whole output.
func (b *CapBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := int64(len(b.head) + len(b.tail))
	out := make([]byte, 0, kept+64)
	out = append(out, b.head...)
	if dropped := b.total - kept; dropped > 0 {
		out = append(out, ElisionMarker(dropped)...)
	}
	out = append(out, b.tail[b.start:]...)
	out = append(out, b.tail[:b.start]...)
	return out
}

// ElisionMarker is the text put where n bytes were elided.
func ElisionMarker(n int64) string {
	return fmt.Sprintf("\n[... forkline: %d bytes elided ...]\n", n)
}
