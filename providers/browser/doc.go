// Package browser puts a headless Chromium beside a sandbox. A Session is a
// runtime.Session decorator around a providers.Sandbox: the GUI actions
// (navigate, click, type, key, scroll, screenshot, wait) go to Chromium over
// the DevTools protocol (chromedp), every other action to the sandbox, and
// Close closes both. Provider decorates a providers.Provider so that the
// sandboxes whose Spec asks for a GUI (providers.GUI) come wrapped and say
// so (SandboxInfo.GUI), and their golden checkpoints hold a prepared
// browser profile; it passes the providers conformance suite like every
// backend.
//
// It knows runtime actions and observations, the provider contract and the
// DevTools protocol. It does not know tasks, policies, capture policies or
// datasets: a sandbox's GUI request and a Config are all it is given.
//
// # Where Chromium runs
//
// On providers whose sandboxes are host processes (Capabilities().Isolation
// "none", e.g. local), Chromium runs on the host with the workspace
// (SandboxInfo.Workspace, a host path) as its file tree, in its own process
// group. A sandbox whose processes the host cannot reach implements Piper,
// and Chromium then runs inside it (Config.Exec is then the path in the
// sandbox's image, e.g. forkline/chromium, which forkline images builds), driven
// through --remote-debugging-pipe on file descriptors 3 and 4 dup'ed from
// the stdin and stdout of the provider's own exec stream: no TCP port is
// opened, so a container with network none works. A sandbox that does
// neither gets ErrNoHost from NewSession.
//
// Each session starts its own Chromium process, lazily, at its first GUI
// action, and kills it (and every process of its profile) at Close. One
// replica never shares a browser with another.
//
// # Files in the workspace
//
//	.browser/profile/   the Chromium profile (--user-data-dir)
//	.browser/pid        the browser's process id, as the sandbox sees it (host pid on local)
//	.browser/url        the current page, workspace-relative when it is a workspace file
//	.browser/title      the current page's title
//	.browser/text       the current page's visible text (document.body.innerText)
//
// The profile lives in the workspace so that setup can prepare it and forks
// inherit it: Provider's Checkpoint starts the golden sandbox's browser, opens
// the start page, closes the browser gracefully (so the profile is complete
// on disk) and only then checkpoints, so every fork starts from the same
// browser state on disk. Memory state (open tabs, scroll positions) is not
// forked, like everything else in forkline.
//
// A checkpoint in the middle of an episode (a branch point) does the same
// to a browser that is running: it writes the page files, notes the page
// shown, closes the browser gracefully and checkpoints; forks of it start
// a browser on the parent's profile that opens the parent's page, and the
// parent itself reopens it at its next GUI action. What lived only in the
// page — fields typed but not submitted, scroll positions, script state —
// is gone in both.
//
// The page files are how shell verifiers see what the browser did: they are
// rewritten, when a GUI action changed something, right before the next
// action that goes to the sandbox (an exec, a read_file, the verifier). A
// verifier is a shell command like any other and reads them with grep.
//
// # Pages and network
//
// Pages come from the sandbox's own files: navigate's url may be a
// workspace-relative path (index.html, app/list.html?q=x#top), which becomes
// a file:// URL into the workspace, a file:// URL inside the workspace, a
// loopback http(s) URL (localhost, 127.0.0.1, [::1]: a server the task
// runs in the sandbox), about:blank or a data: URL. Anything else is refused
// with a path_refused observation. Beyond what navigate accepts, Chromium's
// own network is closed by its host resolver rules: every host name and
// address except the loopback ones fails to resolve, so a page cannot reach
// out either, and background networking, component updates and sync are off.
// URLs in observations and page files are shown workspace-relative, so they
// do not depend on where a replica's workspace happens to be.
//
// # Observations
//
// Every GUI action answers with an Observation whose Output is a short text
// (url, title, and what went wrong if anything did), whose Screenshot is a
// PNG of the viewport (Width x Height CSS pixels at device scale 1: the
// pixels are the click coordinates) and whose AXTree is a compact
// accessibility tree, as Config.Screenshots and Config.A11y say; a screenshot
// action always carries a screenshot. ExitCode is -1: GUI actions are not
// commands.
//
// The tree comes from the protocol's Accessibility domain
// (getFullAXTree), with bounds from one DOMSnapshot capture, as JSON: each
// node {"role", "name", "value", "states", "bounds": [x, y, w, h], "children"},
// empty fields left out, bounds in viewport pixels. Noise is pruned: ignored
// nodes, inline text boxes, and unnamed generic/none/LabelText containers
// disappear with their children hoisted into the parent; static text that
// only repeats its parent's or a sibling's name is dropped.
//
// After click, type, key and scroll the session lets the page settle before it
// observes: it waits two animation frames and, when the input started a
// navigation, for the new page's load (bounded by Config.LoadTimeout).
//
// # Bad input and failures
//
// A click outside the viewport, a navigation to a missing file, a refused
// URL, a page that does not finish loading within Config.LoadTimeout
// (loading is then stopped), an unknown key: each is an Observation with
// Error set and a screenshot of whatever the page shows, never a Go error.
// Every protocol call is bounded by Config.CallTimeout, so a hung renderer
// gives an observation that says so. A Go error from Act means the browser
// itself is gone (it crashed, was killed, or could not start): the session
// is then broken and every later GUI action fails the same way, so the
// episode ends with env_error and the pool replaces the replica.
package browser
