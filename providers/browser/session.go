package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	_ "image/png" // DecodeConfig of screenshots
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/domsnapshot"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// Session is a sandbox with a browser beside it. It implements
// providers.Sandbox (and so runtime.Session): GUI actions go to Chromium,
// every other action to the sandbox. Like any session it is used by one
// goroutine at a time; Close may come from another and waits for a running
// action.
type Session struct {
	sb  providers.Sandbox
	cfg Config
	ws  string // the workspace as Chromium sees it
	l   launcher

	mu          sync.Mutex
	running     bool
	closed      bool
	broken      error // the browser died; every later GUI action fails with it
	cancelAlloc context.CancelFunc
	cancelTab   context.CancelFunc
	bctx        context.Context // the browser's tab; lives until Close
	mainFrame   string
	notes       []string // said once, in the next GUI observation
	dirty       bool     // the page may differ from the page files
	dialogs     chan string
	onClose     func() // set by Provider: forget the session once it is closed
	// reopen is the page the browser opens at its next start instead of
	// the start page: the page it showed when Prepare stopped it in the
	// middle of an episode.
	reopen string
}

// GUIKinds are the action kinds a Session sends to the browser.
var GUIKinds = []runtime.ActionKind{runtime.ActNavigate, runtime.ActClick, runtime.ActType, runtime.ActKey,
	runtime.ActScroll, runtime.ActScreenshot, runtime.ActWait}

func isGUI(k runtime.ActionKind) bool {
	for _, g := range GUIKinds {
		if g == k {
			return true
		}
	}
	return false
}

// NewSession wraps sb. Chromium starts at the first GUI action. It returns
// ErrNoHost when the browser cannot run for sb (see the package comment).
func NewSession(sb providers.Sandbox, cfg Config) (*Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Session{sb: sb, cfg: cfg, ws: sb.Info().Workspace, dialogs: make(chan string, 8)}
	if p, ok := sb.(Piper); ok {
		s.l = &pipeLauncher{sb: p}
	} else if st, err := os.Stat(s.ws); err == nil && st.IsDir() && strings.HasPrefix(s.ws, "/") {
		s.l = &hostLauncher{}
	} else {
		return nil, ErrNoHost
	}
	return s, nil
}

// Info is the sandbox's, with GUI set: GUI actions reach the browser.
func (s *Session) Info() providers.SandboxInfo {
	info := s.sb.Info()
	info.GUI = true
	return info
}

// Sandbox returns the wrapped sandbox.
func (s *Session) Sandbox() providers.Sandbox { return s.sb }

// Config returns the session's configuration.
func (s *Session) Config() Config { return s.cfg }

// BrowserPID is the host process id of the running browser, or 0 when it is
// not running or does not run on this host.
func (s *Session) BrowserPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return 0
	}
	if _, ok := s.l.(*hostLauncher); !ok {
		return 0
	}
	return s.l.pid()
}

// Act runs one action. GUI actions go to the browser, others to the sandbox;
// before a sandbox action, page files are refreshed when a GUI action may
// have changed the page.
func (s *Session) Act(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return runtime.Observation{}, providers.ErrClosed
	}
	if !isGUI(a.Kind) {
		if s.dirty && s.running && s.broken == nil {
			if err := s.writePageFiles(ctx); err != nil {
				return runtime.Observation{}, err
			}
		}
		return s.sb.Act(ctx, a)
	}
	return s.gui(ctx, a)
}

// Observe returns what the page shows now, as a GUI action's observation
// would (url and title, and the screenshot and accessibility tree the
// config asks for), without acting: an episode's first observation, the
// start page. It starts the browser when it is not running.
func (s *Session) Observe(ctx context.Context) (runtime.Observation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return runtime.Observation{}, providers.ErrClosed
	}
	if s.broken != nil {
		return runtime.Observation{}, s.broken
	}
	began := time.Now()
	if !s.running {
		if err := s.start(ctx); err != nil {
			if ctx.Err() != nil {
				return runtime.Observation{}, ctx.Err()
			}
			return runtime.Observation{}, err
		}
	}
	obs, err := s.observe(ctx, false)
	if err != nil {
		return runtime.Observation{}, err
	}
	obs.OutputBytes = int64(len(obs.Output))
	obs.Duration = time.Since(began)
	return obs, nil
}

// Close kills the browser and closes the sandbox.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.stop(false)
	if s.onClose != nil {
		s.onClose()
	}
	return s.sb.Close(ctx)
}

// Prepare closes the browser gracefully, so the profile on disk is
// complete, and returns the page a browser started on that profile should
// open. A session whose browser has not run yet (a golden being built) first
// starts it and opens the start page, so the profile exists. A session in
// the middle of an episode first writes the page files, and returns the page
// it shows (workspace-relative when it is a workspace file), which this
// session, too, reopens at its next GUI action; memory state — form fields
// typed but not saved, scroll positions, script state — is lost. A page
// that cannot be a start page (an error page) gives the configured start
// page. The session stays usable; the next GUI action starts a new browser
// on that profile.
func (s *Session) Prepare(ctx context.Context) (page string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", providers.ErrClosed
	}
	if s.broken != nil {
		return "", s.broken
	}
	page = s.startPage()
	if s.running {
		if s.dirty {
			if err := s.writePageFiles(ctx); err != nil {
				return "", err
			}
		}
		url, _, failed, broken := s.location(ctx)
		if broken != nil {
			return "", broken
		}
		if _, refused := resolveURL(url, "/workspace"); failed == nil && url != "" && refused == "" {
			page = url
		}
	} else if err := s.start(ctx); err != nil {
		return "", err
	}
	s.stop(true)
	s.notes, s.dirty = nil, false
	if page != s.cfg.Start {
		s.reopen = page
	}
	return page, nil
}

// startPage is the page the next browser start opens.
func (s *Session) startPage() string {
	if s.reopen != "" {
		return s.reopen
	}
	return s.cfg.Start
}

// start launches Chromium, sets the viewport, and opens the start page.
// A start page that fails to load is a note for the first observation, not
// an error: the browser is up.
func (s *Session) start(ctx context.Context) error {
	allocCtx, cancelAlloc := s.l.allocator(s.cfg, s.ws)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx,
		chromedp.WithLogf(func(string, ...any) {}), chromedp.WithErrorf(func(string, ...any) {}))
	// The first call binds the browser's life to tabCtx, so it must not
	// carry a deadline; the wait below bounds it instead.
	done := make(chan error, 1)
	go func() {
		done <- chromedp.Do(tabCtx, chromedp.EmulateViewport(int64(s.cfg.Width), int64(s.cfg.Height)))
	}()
	timer := time.NewTimer(s.cfg.StartTimeout)
	defer timer.Stop()
	var err error
	select {
	case err = <-done:
	case <-timer.C:
		err = fmt.Errorf("chromium did not answer within %s", s.cfg.StartTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		cancelTab()
		cancelAlloc()
		s.l.kill()
		return fmt.Errorf("browser: starting %s: %w", s.cfg.exec(), err)
	}
	s.bctx, s.cancelTab, s.cancelAlloc, s.running = tabCtx, cancelTab, cancelAlloc, true
	s.l.started(tabCtx)
	if c := chromedp.FromContext(tabCtx); c != nil && c.Target != nil {
		s.mainFrame = string(c.Target.TargetID)
	}
	// A dialog (alert, confirm, prompt) blocks the page, and so every input
	// and screenshot after it: accept it at once and say so.
	chromedp.Listen(tabCtx, func(ev any) {
		if e, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			select {
			case s.dialogs <- fmt.Sprintf("%s %q", e.Type, e.Message):
			default:
			}
			go chromedp.Call(tabCtx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	})
	if pid := s.l.pid(); pid > 0 {
		s.sb.Act(ctx, runtime.Action{Kind: runtime.ActWriteFile, Path: Dir + "/pid", Content: strconv.Itoa(pid) + "\n"})
	}
	if start := s.startPage(); start != "about:blank" {
		if note, _, err := s.navigate(ctx, start); err != nil {
			return err
		} else if note != "" {
			s.notes = append(s.notes, "start page "+note)
		}
	}
	s.dirty = true
	return nil
}

// stop ends the browser: gracefully (Browser.close, so the profile is
// flushed) or at once; either way every process of it is killed after.
func (s *Session) stop(graceful bool) {
	if !s.running {
		return
	}
	if graceful {
		// Chromium writes pending localStorage at shutdown only on a
		// best-effort basis: its storage service can be gone before the
		// write lands (a CI run lost a golden's localStorage that way).
		// So the writes are made to land before the browser closes.
		// Closing the page's tab ends its renderer, whose storage
		// bindings go with it, and Chromium commits an origin's
		// localStorage as soon as nothing is bound to it; navigating
		// away would keep the renderer, and the commit would wait for a
		// timer. That timer is the second net: with
		// --enable-aggressive-domstorage-flushing every change is
		// committed 1 s after it is made, and the wait below outlasts
		// it. Measured with the browser SIGKILLed after the wait, three
		// busy loops on two cores: localStorage missing from disk 0 of
		// 12 times this way, 1 of 12 after navigating away instead, 3 of
		// 12 without the flag. It costs once per task, not per episode.
		s.closeTab()
		time.Sleep(profileSettle)
		ctx, cancel := context.WithTimeout(s.bctx, 10*time.Second)
		// Helpers (the storage service writing localStorage) may still
		// be flushing the profile when the main process is gone: wait
		// until every process of the profile has exited on its own.
		switch l := s.l.(type) {
		case *hostLauncher:
			chromedp.Cancel(ctx)
			l.waitGone(10 * time.Second)
		case *pipeLauncher:
			// In the sandbox: the pipe may stay open after the browser
			// exits (crashpad inherits it), so it proves nothing.
			if l.closeBrowser(ctx) == nil {
				s.sb.Act(context.WithoutCancel(ctx), runtime.Action{Kind: runtime.ActExec, TimeoutMS: 15_000,
					Cmd: waitGoneScript(path.Join(s.ws, ProfileDir))})
			}
		}
		cancel()
	}
	s.cancelTab()
	s.cancelAlloc()
	s.l.kill()
	s.running = false
	s.bctx = nil
}

// closeTab opens an about:blank tab, so the browser stays up, and closes
// the session's tab. Failures are ignored: the commit timer is the fallback.
func (s *Session) closeTab() {
	c := chromedp.FromContext(s.bctx)
	if c == nil || c.Browser == nil || c.Target == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.bctx, s.cfg.CallTimeout)
	defer cancel()
	cdp.Call(ctx, c.Browser, target.CreateTarget, target.CreateTargetParams{URL: "about:blank"})
	cdp.Call(ctx, c.Browser, target.CloseTarget, target.CloseTargetParams{TargetID: c.Target.TargetID})
}

// profileSettle is how long a graceful stop waits, with its tab closed,
// before closing the browser: longer than the 1 s localStorage commit delay
// that --enable-aggressive-domstorage-flushing sets, with room for a loaded
// machine.
const profileSettle = 1500 * time.Millisecond

// waitGoneScript waits, for up to 10 s, until no process (but zombies) has
// --user-data-dir=profile among its arguments.
func waitGoneScript(profile string) string {
	return `arg=` + shellQuote("--user-data-dir="+profile) + `
i=0
while [ $i -lt 200 ]; do
  busy=
  for f in /proc/[0-9]*/cmdline; do
    if tr '\0' '\n' < "$f" 2>/dev/null | grep -qxF -- "$arg"; then
      st=$(cut -d' ' -f3 "${f%/cmdline}/stat" 2>/dev/null)
      [ "$st" = Z ] || busy=1
    fi
  done
  [ -z "$busy" ] && break
  sleep 0.05; i=$((i + 1))
done`
}

// errBrowserGone wraps the cause when the browser died under a session.
var errBrowserGone = errors.New("browser: chromium is gone")

// call runs fn with a context derived from the browser's, bounded by d and
// cancelled with ctx. It sorts the error: nil; the caller's ctx error; a
// broken browser (returned as broken, and remembered); or anything else
// (the action's own failure: a timeout, a protocol error).
func (s *Session) call(ctx context.Context, d time.Duration, fn func(ctx context.Context) error) (failed, broken error) {
	cctx, cancel := context.WithTimeout(s.bctx, d)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	err := fn(cctx)
	// Between a navigation's answer and its commit (an error page comes
	// from another renderer) the tab answers "not attached" for a moment.
	for err != nil && strings.Contains(err.Error(), "Not attached to an active page") && cctx.Err() == nil {
		select {
		case <-time.After(25 * time.Millisecond):
			err = fn(cctx)
		case <-cctx.Done():
		}
	}
	if err == nil {
		return nil, nil
	}
	if ctx.Err() != nil && s.bctx.Err() == nil {
		return nil, ctx.Err()
	}
	if s.lost(err) {
		return nil, s.markBroken(err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s", d), nil
	}
	return err, nil
}

// lost reports whether err came from a browser that is gone. An answer of
// the browser (a protocol error) means it is alive; any other failure may
// come from a browser that just died before chromedp noticed the closed
// connection, so it waits a moment for that.
func (s *Session) lost(err error) bool {
	if s.bctx.Err() != nil {
		return true
	}
	var answer *cdproto.Error
	if errors.As(err, &answer) {
		return false
	}
	c := chromedp.FromContext(s.bctx)
	if c == nil || c.Browser == nil {
		return false
	}
	select {
	case <-c.Browser.LostConnection:
		return true
	case <-s.bctx.Done():
		return true
	case <-time.After(200 * time.Millisecond):
		return false
	}
}

func (s *Session) markBroken(cause error) error {
	if s.broken == nil {
		s.broken = fmt.Errorf("%w: %v", errBrowserGone, cause)
		// A browser in a sandbox goes with the sandbox's backend (its
		// pipe runs through it). Ask the sandbox, so that errors.Is finds
		// runtime.ErrUnavailable when the backend went away: then the
		// run failed, not the episode.
		pctx, cancel := context.WithTimeout(context.Background(), backendProbeTimeout)
		_, err := s.sb.Act(pctx, runtime.Action{Kind: runtime.ActExec, Cmd: "true"})
		cancel()
		if errors.Is(err, runtime.ErrUnavailable) {
			s.broken = fmt.Errorf("%w: %w", errBrowserGone, err)
		}
		s.stop(false)
	}
	return s.broken
}

// backendProbeTimeout bounds the question markBroken asks the sandbox.
const backendProbeTimeout = 30 * time.Second

// gui performs one GUI action and observes the page.
func (s *Session) gui(ctx context.Context, a runtime.Action) (runtime.Observation, error) {
	began := time.Now()
	if s.broken != nil {
		return runtime.Observation{}, s.broken
	}
	if !s.running {
		if err := s.start(ctx); err != nil {
			if ctx.Err() != nil {
				return runtime.Observation{}, ctx.Err()
			}
			return runtime.Observation{}, err
		}
	}
	var (
		msg   string // what went wrong, if anything
		kind  runtime.ErrorKind
		timed bool
		err   error
	)
	switch a.Kind {
	case runtime.ActNavigate:
		msg, kind, err = s.navigate(ctx, a.URL)
		timed = kind == runtime.ErrTimeout
	case runtime.ActClick:
		if a.X < 0 || a.Y < 0 || a.X >= s.cfg.Width || a.Y >= s.cfg.Height {
			msg, kind = fmt.Sprintf("click at (%d, %d) is outside the %dx%d viewport; nothing was clicked", a.X, a.Y, s.cfg.Width, s.cfg.Height), runtime.ErrActionFail
			break
		}
		msg, kind, err = s.input(ctx, func(ctx context.Context) error {
			return chromedp.Do(ctx, chromedp.MouseClickXY(float64(a.X), float64(a.Y), chromedp.Button(buttonName(a.Button))))
		})
	case runtime.ActType:
		msg, kind, err = s.input(ctx, func(ctx context.Context) error {
			return chromedp.Do(ctx, chromedp.KeyEvent(a.Text))
		})
	case runtime.ActKey:
		presses, perr := parseKeys(a.Keys)
		if perr != nil {
			msg, kind = "key: "+perr.Error(), runtime.ErrActionFail
			break
		}
		msg, kind, err = s.input(ctx, func(ctx context.Context) error {
			for _, p := range presses {
				for _, ev := range p.events() {
					if _, err := chromedp.Call(ctx, input.DispatchKeyEvent, ev); err != nil {
						return err
					}
				}
			}
			return nil
		})
	case runtime.ActScroll:
		msg, kind, err = s.input(ctx, func(ctx context.Context) error {
			// The protocol wants both deltas, and the generated params
			// leave zeros out, so this one is sent as a map.
			return chromedp.FromContext(ctx).Target.Call(ctx, input.CommandDispatchMouseEvent, map[string]any{
				"type": chromedp.MouseWheel, "x": s.cfg.Width / 2, "y": s.cfg.Height / 2, "deltaX": a.DX, "deltaY": a.DY,
			}, nil)
		})
	case runtime.ActWait:
		t := time.NewTimer(time.Duration(a.MS) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return runtime.Observation{}, ctx.Err()
		}
	case runtime.ActScreenshot:
	}
	if err != nil {
		return runtime.Observation{}, err
	}
	s.dirty = true
	obs, err := s.observe(ctx, a.Kind == runtime.ActScreenshot)
	if err != nil {
		return runtime.Observation{}, err
	}
	if msg != "" {
		obs.Output = append([]byte(msg+"\n"), obs.Output...)
		obs.Error, obs.ErrorKind, obs.TimedOut = true, kind, timed
	}
	obs.OutputBytes = int64(len(obs.Output))
	obs.Duration = time.Since(began)
	return obs, nil
}

func buttonName(b string) string {
	if b == "" {
		return "left"
	}
	return b
}

// navigate loads target and waits for its load event. It returns what went
// wrong as a message and kind (refused, missing, load timeout, any other
// load error) and an error only when the browser broke or ctx ended.
func (s *Session) navigate(ctx context.Context, target string) (string, runtime.ErrorKind, error) {
	u, refused := resolveURL(target, s.ws)
	if refused != "" {
		return fmt.Sprintf("navigate %s: refused: %s", target, refused), runtime.ErrPathRefused, nil
	}
	// A failed navigation answers before its error page is shown; the
	// page's own stop-loading event says when it is.
	stopped := make(chan struct{}, 1)
	lctx, unlisten := context.WithCancel(s.bctx)
	defer unlisten()
	chromedp.Listen(lctx, func(ev any) {
		if e, ok := ev.(*page.EventFrameStoppedLoading); ok && string(e.FrameID) == s.mainFrame {
			select {
			case stopped <- struct{}{}:
			default:
			}
		}
	})
	before, sameDoc := s.document(ctx, u)
	failed, broken := s.call(ctx, s.cfg.LoadTimeout, func(ctx context.Context) error {
		return chromedp.Do(ctx, chromedp.Navigate(u))
	})
	if broken != nil {
		return "", "", broken
	}
	if failed == nil {
		if sameDoc {
			return "", "", nil
		}
		return s.waitNewDocument(ctx, target, before)
	}
	var le *chromedp.LoadError
	if errors.As(failed, &le) {
		t := time.NewTimer(s.cfg.LoadTimeout)
		select {
		case <-stopped:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		s.settle(ctx)
	}
	if strings.HasPrefix(failed.Error(), "no answer within") {
		// Stop the load, so the page is usable and observable.
		s.call(ctx, s.cfg.CallTimeout, func(ctx context.Context) error {
			_, err := chromedp.Call(ctx, page.StopLoading, cdp.Empty{})
			return err
		})
		return fmt.Sprintf("navigate %s: the page did not finish loading within %s; loading was stopped", target, s.cfg.LoadTimeout), runtime.ErrTimeout, nil
	}
	if le != nil {
		kind := runtime.ErrActionFail
		switch le.ErrorText {
		case "net::ERR_FILE_NOT_FOUND":
			kind = runtime.ErrNotFound
		case "net::ERR_NAME_NOT_RESOLVED", "net::ERR_BLOCKED_BY_CLIENT", "net::ERR_ACCESS_DENIED":
			kind = runtime.ErrPathRefused
		}
		return fmt.Sprintf("navigate %s: %s", target, le.ErrorText), kind, nil
	}
	return fmt.Sprintf("navigate %s: %v", target, failed), runtime.ErrActionFail, nil
}

// document returns the current document's performance.timeOrigin, which
// differs for every document, and whether navigating to u stays in it (only
// the fragment changes). Zero when it cannot tell.
func (s *Session) document(ctx context.Context, u string) (origin float64, sameDoc bool) {
	var href string
	s.call(ctx, s.cfg.CallTimeout, func(ctx context.Context) error {
		r, err := chromedp.Run(ctx, chromedp.Evaluate[[]any](`[performance.timeOrigin, location.href]`))
		if err == nil && len(r) == 2 {
			origin, _ = r[0].(float64)
			href, _ = r[1].(string)
		}
		return err
	})
	base := func(v string) string { b, _, _ := strings.Cut(v, "#"); return b }
	return origin, strings.Contains(u, "#") && href != "" && base(href) == base(u)
}

// waitNewDocument waits until the navigation's document has replaced the
// one whose timeOrigin is before and has finished loading. chromedp's
// Navigate can return on a stale load event (the initial about:blank of a
// new browser loading late, on a loaded machine) before the new page has
// run its scripts: an observation taken then, or a golden checkpoint
// prepared then, would miss what the page does. A page that does not get
// there within the load timeout is a note, as for a navigation that never
// answers.
func (s *Session) waitNewDocument(ctx context.Context, target string, before float64) (string, runtime.ErrorKind, error) {
	deadline := time.Now().Add(s.cfg.LoadTimeout)
	for {
		ready := false
		_, broken := s.call(ctx, s.cfg.CallTimeout, func(ctx context.Context) error {
			r, err := chromedp.Run(ctx, chromedp.Evaluate[[]any](`[performance.timeOrigin, document.readyState]`))
			if err == nil && len(r) == 2 {
				origin, _ := r[0].(float64)
				state, _ := r[1].(string)
				ready = origin != before && state == "complete"
			}
			return err
		})
		switch {
		case broken != nil:
			return "", "", broken
		case ready:
			return "", "", nil
		case ctx.Err() != nil:
			return "", "", ctx.Err()
		case time.Now().After(deadline):
			return fmt.Sprintf("navigate %s: the page did not finish loading within %s", target, s.cfg.LoadTimeout), runtime.ErrTimeout, nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// input dispatches input events with do, then lets the page settle: two
// animation frames, and the load of a navigation the input started.
func (s *Session) input(ctx context.Context, do func(ctx context.Context) error) (string, runtime.ErrorKind, error) {
	var (
		mu               sync.Mutex
		started, stopped bool
		stoppedCh        = make(chan struct{}, 1)
	)
	lctx, unlisten := context.WithCancel(s.bctx)
	defer unlisten()
	chromedp.Listen(lctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *page.EventFrameStartedLoading:
			if string(e.FrameID) == s.mainFrame {
				started, stopped = true, false
			}
		case *page.EventFrameStoppedLoading:
			if string(e.FrameID) == s.mainFrame && started {
				stopped = true
				select {
				case stoppedCh <- struct{}{}:
				default:
				}
			}
		}
	})
	failed, broken := s.call(ctx, s.cfg.CallTimeout, do)
	if broken != nil {
		return "", "", broken
	}
	if failed != nil {
		return "input failed: " + failed.Error(), runtime.ErrActionFail, nil
	}
	if broken := s.settle(ctx); broken != nil {
		return "", "", broken
	}
	mu.Lock()
	waiting := started && !stopped
	mu.Unlock()
	if !waiting {
		return "", "", nil
	}
	t := time.NewTimer(s.cfg.LoadTimeout)
	defer t.Stop()
	select {
	case <-stoppedCh:
		return "", "", nil
	case <-t.C:
		s.call(ctx, s.cfg.CallTimeout, func(ctx context.Context) error {
			_, err := chromedp.Call(ctx, page.StopLoading, cdp.Empty{})
			return err
		})
		return fmt.Sprintf("the page this input opened did not finish loading within %s; loading was stopped", s.cfg.LoadTimeout), runtime.ErrTimeout, nil
	case <-s.bctx.Done():
		return "", "", s.markBroken(context.Cause(s.bctx))
	case <-ctx.Done():
		return "", "", ctx.Err()
	}
}

// settle waits two animation frames: handlers ran and their result is
// painted. During a navigation the evaluation may fail; that is fine. It
// returns an error only when the browser broke.
func (s *Session) settle(ctx context.Context) error {
	_, broken := s.call(ctx, time.Second, func(ctx context.Context) error {
		_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
			`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, chromedp.EvalAwaitPromise))
		return err
	})
	return broken
}

// observe describes the page: url and title as text, and a screenshot and
// an accessibility tree as the config (or a screenshot action) asks.
// Failures to capture are notes in the text; only a broken browser or an
// ended ctx is an error.
func (s *Session) observe(ctx context.Context, forceShot bool) (runtime.Observation, error) {
	obs := runtime.Observation{ExitCode: -1}
	var text strings.Builder
	for _, n := range s.notes {
		text.WriteString(n + "\n")
	}
	s.notes = nil
	for done := false; !done; {
		select {
		case d := <-s.dialogs:
			text.WriteString("dialog accepted: " + d + "\n")
		default:
			done = true
		}
	}
	url, title, failed, broken := s.location(ctx)
	if broken != nil {
		return obs, broken
	}
	if failed != nil {
		text.WriteString("page: " + failed.Error() + "\n")
	} else {
		fmt.Fprintf(&text, "url: %s\ntitle: %s\n", url, title)
	}
	if s.cfg.Screenshots || forceShot {
		var png []byte
		failed, broken := s.call(ctx, s.cfg.CallTimeout, func(ctx context.Context) error {
			var err error
			png, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
			return err
		})
		if broken != nil {
			return obs, broken
		}
		if failed != nil {
			text.WriteString("screenshot failed: " + failed.Error() + "\n")
		} else if cfg, _, err := image.DecodeConfig(bytes.NewReader(png)); err != nil {
			text.WriteString("screenshot unreadable: " + err.Error() + "\n")
		} else {
			obs.Screenshot = &runtime.Screenshot{PNG: png, Width: cfg.Width, Height: cfg.Height}
		}
	}
	if s.cfg.A11y {
		tree, failed, broken := s.axTree(ctx)
		if broken != nil {
			return obs, broken
		}
		if failed != nil {
			text.WriteString("accessibility tree failed: " + failed.Error() + "\n")
		}
		obs.AXTree = tree
	}
	obs.Output = []byte(text.String())
	return obs, nil
}

// location is the current entry of the tab's history: the URL it shows
// (also for error pages, where location.href would be chrome-error://) and
// its title.
func (s *Session) location(ctx context.Context) (url, title string, failed, broken error) {
	failed, broken = s.call(ctx, s.cfg.CallTimeout, func(ctx context.Context) error {
		h, err := chromedp.Run(ctx, chromedp.NavigationEntries())
		if err != nil {
			return err
		}
		if h.CurrentIndex >= 0 && int(h.CurrentIndex) < len(h.Entries) {
			e := h.Entries[h.CurrentIndex]
			url, title = displayURL(e.URL, s.ws), s.relative(e.Title)
		}
		return nil
	})
	return url, title, failed, broken
}

// relative strips the workspace's file:// prefix from text the browser made
// up (an error page's title is its URL), so observations do not depend on
// where the replica's workspace is.
func (s *Session) relative(text string) string {
	return strings.ReplaceAll(text, fileURL(strings.TrimSuffix(s.ws, "/"))+"/", "")
}

// axTree captures the compact accessibility tree: the full AX tree and one
// DOM snapshot for the layout boxes.
func (s *Session) axTree(ctx context.Context) (string, error, error) {
	var tree string
	failed, broken := s.call(ctx, s.cfg.CallTimeout, func(ctx context.Context) error {
		res, err := chromedp.Call(ctx, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
		if err != nil {
			return err
		}
		snap, err := chromedp.Call(ctx, domsnapshot.CaptureSnapshot, domsnapshot.CaptureSnapshotParams{ComputedStyles: []string{}})
		if err != nil {
			return err
		}
		tree = s.relative(marshalTree(compactTree(res.Nodes, layoutBounds(&snap))))
		return nil
	})
	return tree, failed, broken
}

// maxPageText bounds .browser/text.
const maxPageText = 1 << 20

// writePageFiles refreshes .browser/url, title and text from the page,
// through the sandbox, so shell commands (verifiers) see them.
func (s *Session) writePageFiles(ctx context.Context) error {
	url, title, failed, broken := s.location(ctx)
	if broken != nil {
		return broken
	}
	var text string
	if failed == nil {
		failed, broken = s.call(ctx, s.cfg.CallTimeout, func(ctx context.Context) error {
			var err error
			text, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			return err
		})
		if broken != nil {
			return broken
		}
	}
	if failed != nil {
		// The page is unreadable right now (a hung renderer): say so in the
		// files rather than leaving stale ones.
		url, title, text = "", "", "forkline: page unreadable: "+failed.Error()
	}
	if len(text) > maxPageText {
		text = text[:maxPageText]
	}
	for name, content := range map[string]string{"url": url + "\n", "title": title + "\n", "text": text + "\n"} {
		obs, err := s.sb.Act(ctx, runtime.Action{Kind: runtime.ActWriteFile, Path: Dir + "/" + name, Content: content})
		if err != nil {
			return err
		}
		if obs.Error {
			return fmt.Errorf("browser: writing %s/%s: %s", Dir, name, obs.Text())
		}
	}
	s.dirty = false
	return nil
}
