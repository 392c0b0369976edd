package browser_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/providers/browser"
	"github.com/forkline/forkline/runtime"
)

// pipeSandbox gives a local sandbox the Piper ability, as a container
// provider would: the process runs with the workspace as its directory and
// talks over stdin and stdout only.
type pipeSandbox struct {
	providers.Sandbox
	mu    sync.Mutex
	procs []*exec.Cmd
}

func (p *pipeSandbox) Pipe(ctx context.Context, argv []string) (io.ReadWriteCloser, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = p.Info().Workspace
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.procs = append(p.procs, cmd)
	p.mu.Unlock()
	return &procStream{cmd: cmd, in: in, out: out}, nil
}

type procStream struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  io.ReadCloser
	once sync.Once
}

func (s *procStream) Read(b []byte) (int, error)  { return s.out.Read(b) }
func (s *procStream) Write(b []byte) (int, error) { return s.in.Write(b) }
func (s *procStream) Close() error {
	s.once.Do(func() {
		s.in.Close()
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		s.cmd.Wait()
	})
	return nil
}

func TestPipedBrowser(t *testing.T) {
	needChromium(t)
	prov, err := openLocal(t)
	require.NoError(t, err)
	sb, err := prov.Create(context.Background(), providers.Spec{Files: map[string][]byte{"index.html": []byte(formPage)}})
	require.NoError(t, err)
	psb := &pipeSandbox{Sandbox: sb}
	cfg := browser.DefaultConfig()
	cfg.Width, cfg.Height, cfg.Start = 800, 600, "index.html"
	s, err := browser.NewSession(psb, cfg)
	require.NoError(t, err)
	defer s.Close(context.Background())

	obs := act(t, s, runtime.Action{Kind: runtime.ActScreenshot})
	require.False(t, obs.Error, string(obs.Output))
	checkScreenshot(t, obs, 800, 600)
	findRole(t, obs, "textbox", "Full name")
	require.Zero(t, s.BrowserPID(), "the browser is not a host process of ours")
	ws := sb.Info().Workspace
	b, err := os.ReadFile(filepath.Join(ws, ".browser/pid"))
	require.NoError(t, err, "the piped process records its own pid")
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	require.NoError(t, err)
	require.Contains(t, string(cmdline), "--remote-debugging-pipe")

	obs = act(t, s, runtime.Action{Kind: runtime.ActClick, X: 240, Y: 110})
	require.False(t, obs.Error, string(obs.Output))
	obs = act(t, s, runtime.Action{Kind: runtime.ActType, Text: "pipe"})
	require.Equal(t, "pipe", findRole(t, obs, "textbox", "Full name").Value)

	require.NoError(t, s.Close(context.Background()))
	require.Empty(t, processesUsing(filepath.Join(ws, browser.ProfileDir)))
}
