package local

import (
	"bytes"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// slowWriter is a consumer that falls behind: each write waits first, as
// the copying goroutine does on a loaded machine.
type slowWriter struct {
	mu    sync.Mutex
	delay time.Duration
	buf   bytes.Buffer
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.delay)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// What a command wrote before its shell exited is in its observation even
// when the copy falls behind the grace, and a background job that keeps
// the pipe open (holding it past the grace) does not hold the exec. Before,
// os/exec closed the pipe when WaitDelay passed and dropped what its copy
// had not read: the observation lost its tail.
func TestOutputPipeKeepsWhatWasWrittenPastTheGrace(t *testing.T) {
	for _, held := range []bool{false, true} {
		dst := &slowWriter{delay: 150 * time.Millisecond}
		p, err := newOutputPipe(dst)
		require.NoError(t, err)
		var job int
		if held {
			// A background job's copy of the write end.
			job, err = syscall.Dup(int(p.w.Fd()))
			require.NoError(t, err)
		}
		want := bytes.Repeat([]byte("0123456789abcde\n"), 3750) // 60,000 bytes: within a pipe's buffer
		_, err = p.w.Write(want)
		require.NoError(t, err)
		p.started()
		p.finish(20 * time.Millisecond)
		if held {
			_, werr := syscall.Write(job, []byte("late"))
			require.ErrorIs(t, werr, syscall.EPIPE, "the job's next write fails: the pipe is closed")
			syscall.Close(job)
		}
		dst.mu.Lock()
		require.Equal(t, len(want), dst.buf.Len(), "held=%v", held)
		require.Equal(t, want, dst.buf.Bytes())
		dst.mu.Unlock()
	}
}
