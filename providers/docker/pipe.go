package docker

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
)

// Pipe starts argv in the sandbox with its stdin and stdout connected to the
// returned stream (stderr is discarded). It is how a process inside a
// network-none container is driven from the host without a port — the
// browser environment runs Chromium with --remote-debugging-pipe through it
// (it implements browser.Piper). Closing the stream closes the process's
// stdin, then the connection.
func (s *sandbox) Pipe(ctx context.Context, argv []string) (io.ReadWriteCloser, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	ec, err := s.p.cli.ExecCreate(ctx, s.id, client.ExecCreateOptions{
		Cmd: argv, AttachStdin: true, AttachStdout: true, AttachStderr: true, WorkingDir: s.spec.workdir,
	})
	if err != nil {
		return nil, s.infraError(ctx, "pipe", err)
	}
	at, err := s.p.cli.ExecAttach(ctx, ec.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, s.infraError(ctx, "pipe", err)
	}
	pr, pw := io.Pipe()
	es := &execStream{at: at.HijackedResponse, out: pr}
	go func() {
		_, err := stdcopy.StdCopy(pw, io.Discard, at.Reader)
		// A stream that ends while nobody closed it may have lost its
		// engine: say so, so a reader can tell that from the process ending.
		if !es.closed.Load() {
			if gerr := s.p.gone(context.WithoutCancel(ctx), "the pipe's stream in "+s.short()+" ended", err); gerr != nil {
				err = gerr
			}
		}
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	return es, nil
}

// execStream is a hijacked exec connection: writes go to the process's
// stdin, reads come from its demultiplexed stdout.
type execStream struct {
	at     client.HijackedResponse
	out    *io.PipeReader
	once   sync.Once
	closed atomic.Bool
}

func (e *execStream) Read(b []byte) (int, error)  { return e.out.Read(b) }
func (e *execStream) Write(b []byte) (int, error) { return e.at.Conn.Write(b) }

func (e *execStream) Close() error {
	e.once.Do(func() {
		e.closed.Store(true)
		e.at.CloseWrite() // the process reads EOF on stdin
		e.at.Close()
		e.out.Close()
	})
	return nil
}
