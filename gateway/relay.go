package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Relay carries every TCP connection accepted on l to a new connection to
// the unix socket at socket, byte for byte, both ways, until ctx ends; it
// then closes l and the connections it carries. It is how a harness in a
// sandbox without a network reaches the gateway: the gateway's socket is
// bind-mounted into the sandbox, and forkline's static binary, mounted
// beside it, runs Relay on a loopback port of the sandbox's own network
// namespace (forkline relay). A connection the socket refuses is closed.
func Relay(ctx context.Context, l net.Listener, socket string) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	stop := context.AfterFunc(ctx, func() {
		_ = l.Close()
		mu.Lock()
		for c := range open {
			_ = c.Close()
		}
		mu.Unlock()
	})
	defer stop()
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	var err error
	for {
		in, aerr := l.Accept()
		if aerr != nil {
			if ctx.Err() == nil && !errors.Is(aerr, net.ErrClosed) {
				err = aerr
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 10 * time.Second}
			out, derr := d.DialContext(ctx, "unix", socket)
			if derr != nil {
				_ = in.Close()
				return
			}
			track(in, true)
			track(out, true)
			pipe(in, out)
			track(in, false)
			track(out, false)
		}()
	}
	wg.Wait()
	return err
}

// pipe copies a to b and b to a until both directions ended, closing the
// write side of each as its source ends, then both.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
	_ = a.Close()
	_ = b.Close()
}
