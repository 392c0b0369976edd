package providertest

import (
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// SocketProxy forwards a unix socket of its own to a backend's socket, so
// that a test can take the backend away from the one provider that dials
// the proxy (Cut: close every connection and remove the socket; Freeze:
// keep connections but pass no bytes) while the backend keeps serving
// everyone else. It implements the Cut, Freeze and Restore of Outage.
type SocketProxy struct {
	t             testing.TB
	path          string // the socket clients dial
	network, addr string // the backend's
	mu            sync.Mutex
	ln            net.Listener
	conns         map[net.Conn]bool
	frozen        bool
	thawed        chan struct{} // closed when a freeze ends
}

// NewSocketProxy starts a proxy to the backend at network/addr (e.g. "unix",
// "/var/run/docker.sock"), listening on a fresh unix socket; it stops when
// t ends.
func NewSocketProxy(t testing.TB, network, addr string) *SocketProxy {
	t.Helper()
	// A short path: unix socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "fl-proxy-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	px := &SocketProxy{t: t, path: filepath.Join(dir, "backend.sock"), network: network, addr: addr, conns: map[net.Conn]bool{}}
	px.listen()
	t.Cleanup(func() { px.Restore(); px.Cut() })
	return px
}

// Path is the proxy's socket.
func (px *SocketProxy) Path() string { return px.path }

func (px *SocketProxy) listen() {
	ln, err := net.Listen("unix", px.path)
	require.NoError(px.t, err)
	px.mu.Lock()
	px.ln = ln
	px.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go px.serve(c)
		}
	}()
}

func (px *SocketProxy) track(c net.Conn) bool {
	px.mu.Lock()
	defer px.mu.Unlock()
	if px.ln == nil {
		return false
	}
	px.conns[c] = true
	return true
}

func (px *SocketProxy) serve(c net.Conn) {
	if !px.track(c) {
		c.Close()
		return
	}
	up, err := net.Dial(px.network, px.addr)
	if err != nil {
		c.Close()
		return
	}
	if !px.track(up) {
		c.Close()
		up.Close()
		return
	}
	go px.pass(up, c)
	px.pass(c, up)
}

// pass copies src to dst until either ends; while frozen it holds what it
// read instead of writing it.
func (px *SocketProxy) pass(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			px.mu.Lock()
			frozen, thawed := px.frozen, px.thawed
			px.mu.Unlock()
			if frozen {
				<-thawed // Restore closed both ends first: the write fails
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (px *SocketProxy) closeConns() {
	for c := range px.conns {
		c.Close()
	}
	px.conns = map[net.Conn]bool{}
}

// Cut closes the socket (dials then fail: the file is gone) and every
// connection, as a stopped backend does.
func (px *SocketProxy) Cut() {
	px.mu.Lock()
	defer px.mu.Unlock()
	if px.ln != nil {
		px.ln.Close() // removes the socket file
		px.ln = nil
	}
	px.closeConns()
}

// Freeze keeps accepting and holding connections but passes no more bytes,
// as a hung backend does.
func (px *SocketProxy) Freeze() {
	px.mu.Lock()
	defer px.mu.Unlock()
	if !px.frozen {
		px.frozen, px.thawed = true, make(chan struct{})
	}
}

// Restore ends a cut or a freeze. Connections held during a freeze are
// dropped before their copiers wake (their callers gave up on them), so
// nothing sent during the freeze reaches the backend afterwards.
func (px *SocketProxy) Restore() {
	px.mu.Lock()
	if px.frozen {
		px.closeConns()
		px.frozen = false
		close(px.thawed)
	}
	cut := px.ln == nil
	px.mu.Unlock()
	if cut {
		px.listen()
	}
}
