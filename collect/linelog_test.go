package collect

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// A provider writes its image lines from the goroutines that pull and
// build in parallel: every line arrives whole, as one record, however the
// writes interleave (without the lock, the shared buffer was cut under a
// concurrent append: slice bounds out of range).
func TestLineLogTakesConcurrentWriters(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) {
		mu.Lock()
		defer mu.Unlock()
		out.Write(p)
	}), nil))
	l := &lineLog{log: log}
	var wg sync.WaitGroup
	const writers, lines = 8, 200
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range lines {
				// Two writes per line, as fmt.Fprintf of a long line may.
				fmt.Fprintf(l, "writer %d line %d ", w, i)
				fmt.Fprintf(l, "%s\n", strings.Repeat("x", 40))
			}
		}()
	}
	wg.Wait()
	l.flush()
	got := strings.Count(out.String(), "level=INFO")
	require.Equal(t, writers*lines, got, "one record per line")
}
