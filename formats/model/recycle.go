package model

import (
	"math/bits"
	"sync"
)

// recycler is the memory.Allocator of a TableWriter's builders: it keeps
// the buffers of a batch the encoder has released and hands them to the
// next batch's builders, so building a batch does not allocate (and have
// the runtime clear, and the GC sweep) tens of megabytes afresh each time.
//
// A buffer handed out again is cleared first, whole, as the Go allocator's
// are: the builders clear what they grow by, but the IPC writer sends a
// buffer's bytes past the values as padding when they are there, and those
// must not depend on which batch the buffer served before (hf-disk's
// files came out different from run to run without it). Clearing warm
// memory still saves the fresh allocation, its page faults and the GC's
// work on it.
//
// Buffers are kept by capacity, a power of two; at most maxKept bytes are
// kept (about two batches' worth: the one being built and the one being
// encoded), and a buffer freed beyond that is left to the GC, so memory
// stays bounded by the batch size as before.
type recycler struct {
	mu   sync.Mutex
	free [64][][]byte // by log2 of the capacity
	kept int
}

const (
	recycleMin = 64
	maxKept    = 2 * DefaultBatchBytes
)

func sizeClass(size int) (class int, capacity int) {
	if size < recycleMin {
		size = recycleMin
	}
	class = bits.Len(uint(size - 1))
	return class, 1 << class
}

func (r *recycler) Allocate(size int) []byte {
	class, capacity := sizeClass(size)
	r.mu.Lock()
	if n := len(r.free[class]); n > 0 {
		b := r.free[class][n-1]
		r.free[class][n-1] = nil
		r.free[class] = r.free[class][:n-1]
		r.kept -= capacity
		r.mu.Unlock()
		b = b[:capacity]
		clear(b)
		return b[:size]
	}
	r.mu.Unlock()
	return make([]byte, size, capacity)
}

func (r *recycler) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		return b[:size]
	}
	nb := r.Allocate(size)
	copy(nb, b)
	r.Free(b)
	return nb
}

func (r *recycler) Free(b []byte) {
	c := cap(b)
	if c < recycleMin || c&(c-1) != 0 {
		return // not one of ours
	}
	class := bits.Len(uint(c - 1))
	r.mu.Lock()
	if r.kept+c <= maxKept {
		r.free[class] = append(r.free[class], b[:0])
		r.kept += c
	}
	r.mu.Unlock()
}
