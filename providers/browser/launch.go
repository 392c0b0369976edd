package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chromedp/cdproto"
	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// Piper is implemented by sandboxes whose processes the host cannot reach
// over the network (a container with network none). Pipe starts argv inside
// the sandbox, in its workspace, and connects the process's stdin and stdout
// to the returned stream: Write feeds its stdin, Read returns its stdout and
// io.EOF once the process closed it (its stderr is not part of the stream).
// Close ends the process and releases the stream; it is idempotent. The
// process must not outlive the sandbox.
//
// A browser session uses it to run Chromium inside the sandbox with
// --remote-debugging-pipe on file descriptors 3 and 4 dup'ed from stdin and
// stdout, so the DevTools protocol flows over the provider's own exec stream
// and no port is opened.
type Piper interface {
	Pipe(ctx context.Context, argv []string) (io.ReadWriteCloser, error)
}

// ErrNoHost is returned by NewSession for a sandbox Chromium cannot be run
// beside: its workspace is not a host directory and it does not implement
// Piper.
var ErrNoHost = errors.New("browser: no way to run chromium for this sandbox (its workspace is not on this host and it cannot pipe a process)")

// launcher starts one Chromium for one session and cleans up after it.
type launcher interface {
	// allocator returns the chromedp allocator context of the browser.
	allocator(cfg Config, ws string) (context.Context, context.CancelFunc)
	// started is called once the browser answers.
	started(bctx context.Context)
	// pid is the browser's process id as the sandbox's commands see it, or
	// 0 when unknown.
	pid() int
	// kill ends every process of the browser that is left.
	kill()
}

// chromiumFlags are the switches every session's Chromium gets: headless,
// no sandbox (it runs as the task's user, often root), no GPU, nothing that
// phones home, and a closed network (hostResolverRules).
func chromiumFlags(cfg Config, ws string) []string {
	profile := path.Join(ws, ProfileDir)
	return []string{
		"--headless",
		"--no-sandbox",
		"--disable-gpu",
		"--no-first-run",
		"--no-default-browser-check",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-sync",
		"--disable-extensions",
		"--disable-default-apps",
		"--disable-breakpad",
		"--disable-crash-reporter",
		"--disable-dev-shm-usage", // /dev/shm is 64 MB in a default container
		"--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication",
		"--disable-smooth-scrolling", // a scroll has landed when its observation is taken
		// localStorage commits 1 s after a change instead of 5-60 s:
		// Chromium does not promise to write pending changes at
		// shutdown, so a golden profile relies on this (see stop).
		"--enable-aggressive-domstorage-flushing",
		"--mute-audio",
		"--metrics-recording-only",
		"--password-store=basic",
		"--use-mock-keychain",
		"--force-color-profile=srgb",
		"--force-device-scale-factor=1",
		"--host-resolver-rules=" + hostResolverRules,
		fmt.Sprintf("--window-size=%d,%d", cfg.Width, cfg.Height),
		"--user-data-dir=" + profile,
	}
}

// hostLauncher runs Chromium as a host process, for sandboxes whose
// workspace is a host directory (providers/local).
type hostLauncher struct {
	profile string // absolute host path of the profile

	mu      sync.Mutex
	browser int // pid, also the process group id
}

func (h *hostLauncher) allocator(cfg Config, ws string) (context.Context, context.CancelFunc) {
	h.profile = path.Join(ws, ProfileDir)
	// Stale lock files of the golden's browser (see pipeAllocator).
	for _, f := range []string{"SingletonLock", "SingletonSocket", "SingletonCookie"} {
		os.Remove(path.Join(h.profile, f))
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(cfg.exec()),
		// Chromium's own files (NSS database, caches outside the profile)
		// stay in the workspace's browser directory, not the user's home.
		chromedp.Env("HOME="+path.Join(ws, Dir, "home"), "XDG_CONFIG_HOME="+path.Join(ws, Dir, "home/.config"),
			"XDG_CACHE_HOME="+path.Join(ws, Dir, "home/.cache")),
		chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
			// Its own process group, so Close can kill every helper
			// process; and killed with the collector's thread if that dies.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		}),
	}
	for _, f := range chromiumFlags(cfg, ws) {
		name, val, hasVal := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if hasVal {
			opts = append(opts, chromedp.Flag(name, val))
		} else {
			opts = append(opts, chromedp.Flag(name, true))
		}
	}
	return chromedp.NewExecAllocator(context.Background(), opts...)
}

func (h *hostLauncher) started(bctx context.Context) {
	if c := chromedp.FromContext(bctx); c != nil && c.Browser != nil && c.Browser.Process() != nil {
		h.mu.Lock()
		h.browser = c.Browser.Process().Pid
		h.mu.Unlock()
	}
}

func (h *hostLauncher) pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.browser
}

// waitGone waits, up to d, until no live process uses the profile.
func (h *hostLauncher) waitGone(d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if len(profileProcesses(h.profile, false)) == 0 {
			return
		}
	}
}

// profileProcesses lists the processes with --user-data-dir=profile among
// their arguments (zombies too when withZombies).
func profileProcesses(profile string, withZombies bool) []int {
	if profile == "" {
		return nil
	}
	want := []byte("--user-data-dir=" + profile + "\x00")
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !containsArg(cmdline, want) {
			continue
		}
		if !withZombies {
			if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
				if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) > 0 && f[0] == "Z" {
					continue
				}
			}
		}
		out = append(out, pid)
	}
	return out
}

// kill ends the browser's process group and then any process still using
// the profile (a helper that left the group); the profile path is unique to
// the sandbox, so nothing else matches.
func (h *hostLauncher) kill() {
	if pid := h.pid(); pid > 0 {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
	if h.profile == "" {
		return
	}
	deadline := time.Now().Add(2 * time.Second)
	for quiet := 0; quiet < 3 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		found := profileProcesses(h.profile, false)
		for _, pid := range found {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(found) == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
}

func containsArg(cmdline, arg []byte) bool {
	return strings.Contains("\x00"+string(cmdline), "\x00"+string(arg))
}

// pipeLauncher runs Chromium inside a Piper sandbox.
type pipeLauncher struct {
	sb Piper

	mu     sync.Mutex
	stream io.ReadWriteCloser
	conn   *chromedp.PipeConn
}

// closeBrowser asks the browser to close (Browser.close), written straight
// to the pipe: chromedp only sends that command from Cancel, which closes
// gracefully only browsers it started itself. The id is far above
// chromedp's counter and still an int32, as Chromium requires.
func (p *pipeLauncher) closeBrowser(ctx context.Context) error {
	p.mu.Lock()
	conn := p.conn
	p.mu.Unlock()
	if conn == nil {
		return errors.New("browser: no pipe")
	}
	return conn.Write(ctx, &cdproto.Message{ID: 1 << 30, Method: cdproto.MethodType(cdpbrowser.CommandClose)})
}

func (p *pipeLauncher) allocator(cfg Config, ws string) (context.Context, context.CancelFunc) {
	return chromedp.NewAllocatorContext(context.Background(), &pipeAllocator{l: p, cfg: cfg, ws: ws})
}

func (p *pipeLauncher) started(context.Context) {}

// pid is unknown on this side: the process writes its own to .browser/pid.
func (p *pipeLauncher) pid() int { return 0 }

func (p *pipeLauncher) kill() {
	p.mu.Lock()
	s := p.stream
	p.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// pipeAllocator starts Chromium through the sandbox's Pipe and speaks the
// protocol over the stream: fd 3 (commands) is the process's stdin, fd 4
// (replies and events) its stdout, and its own stdout and stderr go to
// .browser/chromium.log. It attaches, in chromedp's terms: chromedp does not
// own a process, so the session closes the stream itself.
type pipeAllocator struct {
	l   *pipeLauncher
	cfg Config
	ws  string
}

func (a *pipeAllocator) Attaches() bool { return true }
func (a *pipeAllocator) Wait()          {}

func (a *pipeAllocator) Allocate(ctx context.Context, opts ...chromedp.BrowserOption) (*chromedp.Browser, error) {
	args := append(chromiumFlags(a.cfg, a.ws), "--remote-debugging-pipe", "about:blank")
	dir := path.Join(a.ws, Dir)
	// The profile's Singleton* files name the host and pid that last held
	// it; in a fork they are stale by construction (another container's
	// hostname), and Chromium would refuse the profile.
	script := fmt.Sprintf(`mkdir -p %[1]s && rm -f %[1]s/profile/Singleton* && echo $$ > %[1]s/pid && HOME=%[1]s/home exec %[2]s "$@" 3<&0 4>&1 </dev/null >>%[1]s/chromium.log 2>&1`,
		shellQuote(dir), shellQuote(a.cfg.exec()))
	argv := append([]string{"/bin/sh", "-c", script, "chromium"}, args...)
	stream, err := a.l.sb.Pipe(ctx, argv)
	if err != nil {
		return nil, fmt.Errorf("browser: starting chromium through the sandbox: %w", err)
	}
	conn := chromedp.NewPipeConn(stream, stream)
	a.l.mu.Lock()
	a.l.stream, a.l.conn = stream, conn
	a.l.mu.Unlock()
	return chromedp.NewBrowserTransport(ctx, conn, opts...)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
