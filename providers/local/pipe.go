package local

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"
)

// outputPipe carries an exec's stdout and stderr (one pipe, so the two
// interleave as the command wrote them) into w.
//
// os/exec's own copy of a non-file writer is not used: when the command's
// shell has exited and its WaitDelay passes, os/exec closes the pipe, and
// whatever the command wrote that its copying goroutine had not yet read is
// lost. On a loaded machine that goroutine may not run for longer than the
// grace, so a command's last lines went missing from its observation (and a
// replay of it then saw them, and diverged). Here the grace bounds only the
// wait for background jobs to let go of the pipe: what is already in the
// pipe when it ends is read all the same.
type outputPipe struct {
	r, w   *os.File
	dst    io.Writer
	copied chan struct{}
}

// drainMax bounds what is read from the pipe after the grace: what it
// holds (a pipe buffers 64 KiB by default, up to 1 MiB when enlarged), not
// what a background job goes on writing.
const drainMax = 1 << 20

func newOutputPipe(dst io.Writer) (*outputPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &outputPipe{r: r, w: w, dst: dst, copied: make(chan struct{})}, nil
}

// started closes the parent's write end (the child has its own copies) and
// starts copying.
func (p *outputPipe) started() {
	p.w.Close()
	go func() {
		defer close(p.copied)
		_, _ = io.Copy(p.dst, p.r)
	}()
}

// abandon closes both ends when the command never started.
func (p *outputPipe) abandon() {
	p.w.Close()
	p.r.Close()
}

// finish is called once the command's shell has exited. It waits at most
// grace for every writer (background jobs included) to close the pipe;
// after that it stops the copy, takes what the pipe holds, and closes it,
// so a background job's next write to it fails.
func (p *outputPipe) finish(grace time.Duration) {
	defer p.r.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.copied:
		return
	case <-t.C:
	}
	_ = p.r.SetReadDeadline(time.Now())
	<-p.copied
	// The deadline stops the copy between reads; bytes already in the
	// pipe are read without waiting for more (the descriptor is
	// non-blocking: EAGAIN means empty).
	_ = p.r.SetReadDeadline(time.Time{})
	rc, err := p.r.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 32<<10)
	_ = rc.Read(func(fd uintptr) bool {
		for read := 0; read < drainMax; {
			n, err := syscall.Read(int(fd), buf)
			if n > 0 {
				_, _ = p.dst.Write(buf[:n])
				read += n
			}
			if n <= 0 || (err != nil && !errors.Is(err, syscall.EINTR)) {
				break
			}
		}
		return true
	})
}
