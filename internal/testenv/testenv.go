// Package testenv is the one place where a test learns whether an outside
// component it needs (a Docker engine, an image, Chromium, mount rights, the
// chat-template oracle, Slurm, the loopback registries, the agent harnesses)
// is there, and what happens when it is not: a skip that names the component, the reason and
// the command that installs it on a developer's machine; a failure under
// CI, where FORKLINE_REQUIRE names the components that must be present
// (restic's RESTIC_TEST_DISALLOW_SKIP habit). A green CI run therefore means
// the real thing ran.
//
// FORKLINE_HIDE names components to report missing whatever the machine
// has ("all" hides every one), so a fully equipped machine runs the suite
// as a bare one would: CI runs it so once (.ci/run), and every test that
// reaches a component without asking here first fails there.
//
// A test asks with Need (a probe of its own, run unless the component is
// hidden) or with the shared probes below (NeedDocker, NeedDockerImage, NeedChromium,
// NeedRoot);
// non-test helpers that start a component (internal/oracle) ask Available.
// The package knows the components' names and how to install them; it
// knows nothing of forkline's packages (their tests import it).
package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// The components. Each one's Install says how a developer gets it.
const (
	Overlay        = "overlay"
	Cgroup         = "cgroup"
	Root           = "root"
	Docker         = "docker"
	DockerChromium = "docker-chromium"
	DockerDebian   = "docker-debian"
	Chromium       = "chromium"
	Registry       = "registry"
	Templates      = "templates"
	Slurm          = "slurm"
	Gvisor         = "gvisor"
	DockerRunsc    = "docker-runsc"
	Tmux           = "tmux" // the terminal of send_keys and read_screen
	// Agents: the agent harnesses installed from npm (forkline images -agent).
	Agents = "agents"
	// DuckDB: the query oracle built from internal/oracle/duckdb.
	DuckDB = "duckdb"
	// Validators: Debian's python3-jsonschema and python3-yaml for
	// /usr/bin/python3, the third-party validators format tests check
	// exports with (ATIF against its schema, a dataset card's YAML).
	Validators = "validators"
)

// Component is an outside component some tests need.
type Component struct {
	Name string
	// What it is, in a few words.
	What string
	// Install is the command (or the condition) that provides it.
	Install string
}

var components = []Component{
	{Overlay, "overlayfs and tmpfs mounts for the local provider and the disk-full tests", "run the tests as root (or in a user namespace that may mount: unshare -rm)"},
	{Cgroup, "a writable pids cgroup, which bounds local sandboxes' processes", "run the tests as root on a cgroup v2 machine"},
	{Root, "the test process runs as root (to run a check as another user)", "run the tests as root"},
	{Docker, "a Docker engine with the image forkline/busybox", "bash .ci/docker-up.sh (Debian's docker.io, dockerd --bridge=none --iptables=false, make images)"},
	{DockerChromium, "the Docker image forkline/chromium, for browser tasks in containers", "make images-browser"},
	{DockerDebian, "the Docker image forkline/debian (Harbor tasks' verifiers need bash)", "make images-debian"},
	{Chromium, "Debian's Chromium", "apt-get install chromium (or bash .ci/chromium-up.sh)"},
	{Tmux, "tmux, the terminal of send_keys and read_screen", "apt-get install tmux (or bash .ci/tmux-up.sh)"},
	{Registry, "two container registries on loopback, one open and one behind htpasswd", "bash .ci/registry-up.sh"},
	{Templates, "the test oracle's real chat templates and tokenizers: Node.js with internal/oracle/js/node_modules, /usr/bin/python3 with python3-jinja2", "bash .ci/oracle-up.sh"},
	{Slurm, "Debian's slurm-wlm and munge, run as root (each test starts a one-node cluster on 127.0.0.1)", "bash .ci/slurm-up.sh"},
	{Gvisor, "Debian's runsc (gVisor) running sandboxes as root: the gvisor provider", "bash .ci/gvisor-up.sh (apt-get install runsc; run the tests as root)"},
	{DockerRunsc, "a Docker engine with runsc registered as the runtime \"runsc\" (-provider-opt runtime=runsc)", "bash .ci/gvisor-up.sh, then bash .ci/docker-up.sh (it registers runsc in /etc/docker/daemon.json before it starts dockerd)"},
	{DuckDB, "DuckDB, as the program internal/oracle/duckdb (a module of its own: cgo DuckDB) that runs one SQL query over Parquet shards: the oracle of forkline view's episode filters", "bash .ci/duckdb-up.sh (go build in internal/oracle/duckdb: a C compiler and the Go module proxy)"},
	{Validators, "Debian's python3-jsonschema and python3-yaml for /usr/bin/python3: the validators the ATIF and dataset-card tests use", "bash .ci/validators-up.sh (apt-get install python3-jsonschema python3-yaml)"},
	{Agents, "the agent harnesses Claude Code, Codex and opencode, installed from npm at their pinned versions into forkline's cache (internal/agenttest)", "bash .ci/agents-up.sh (forkline images -agent claude-code,codex,opencode; needs npm)"},
}

// Components lists the components, in a fixed order.
func Components() []Component { return slices.Clone(components) }

// Lookup returns the component called name.
func Lookup(name string) (Component, bool) {
	for _, c := range components {
		if c.Name == name {
			return c, true
		}
	}
	return Component{}, false
}

func names() []string {
	out := make([]string, len(components))
	for i, c := range components {
		out[i] = c.Name
	}
	return out
}

// RequireEnv is the environment variable listing required components,
// comma-separated (e.g. "docker,chromium,overlay"), or "all".
const RequireEnv = "FORKLINE_REQUIRE"

// HideEnv is the environment variable listing components to report
// missing whatever the machine has, comma-separated, or "all".
const HideEnv = "FORKLINE_HIDE"

// listed reports whether the list in env names component (or "all"), and
// the names in it that are no component.
func listed(env, component string) (bool, []string) {
	var unknown []string
	found := false
	for _, c := range strings.Split(os.Getenv(env), ",") {
		c = strings.TrimSpace(c)
		switch {
		case c == "":
		case c == "all" || c == component:
			found = true
		default:
			if _, ok := Lookup(c); !ok {
				unknown = append(unknown, c)
			}
		}
	}
	return found, unknown
}

// Required reports whether component must be present in this run.
func Required(component string) bool {
	ok, _ := listed(RequireEnv, component)
	return ok
}

// Hidden reports whether FORKLINE_HIDE reports component missing.
func Hidden(component string) bool {
	ok, _ := listed(HideEnv, component)
	return ok
}

// errHidden is the reason a hidden component is missing.
var errHidden = errors.New("hidden by " + HideEnv)

// Available is nil when component may be used and probe finds it, else
// why not: hidden by FORKLINE_HIDE, or probe's error. For helpers that
// start a component outside a test (the oracle's processes); a test calls
// Need.
func Available(component string, probe func() error) error {
	if Hidden(component) {
		return fmt.Errorf("%s is %w=%s", component, errHidden, os.Getenv(HideEnv))
	}
	if probe == nil {
		return nil
	}
	return probe()
}

// Need ends the test unless component is there: reported missing when
// FORKLINE_HIDE names it (probe is not run), or when probe fails (its error
// is the reason). A nil probe means only the hiding decides.
func Need(t testing.TB, component string, probe func() error) {
	t.Helper()
	checkLists(t)
	if err := Available(component, probe); err != nil {
		Missing(t, component, err.Error())
	}
}

// Missing ends the test because component is unavailable for reason: a
// skip that names the component, the reason and how to install it, or a
// failure when FORKLINE_REQUIRE names the component. The skip's first line
// has a fixed form that internal/testenv/skipreport (.ci/run) reads:
//
//	testenv: COMPONENT missing: REASON
func Missing(t testing.TB, component, reason string) {
	t.Helper()
	checkLists(t)
	c, ok := Lookup(component)
	if !ok {
		t.Fatalf("testenv: unknown component %q (known: %s)", component, strings.Join(names(), ", "))
	}
	reason = strings.ReplaceAll(strings.TrimSpace(reason), "\n", " ")
	if Required(component) {
		t.Fatalf("testenv: %s is required (%s=%s) but missing: %s\n(%s; install: %s)", component, RequireEnv, os.Getenv(RequireEnv), reason, c.What, c.Install)
	}
	t.Skipf("testenv: %s missing: %s\n(%s; install: %s; %s=%s turns this skip into a failure)", component, reason, c.What, c.Install, RequireEnv, component)
}

// checkLists fails the test when FORKLINE_REQUIRE or FORKLINE_HIDE name a
// component that does not exist: a misspelt name would otherwise require
// or hide nothing, silently.
func checkLists(t testing.TB) {
	t.Helper()
	for _, env := range []string{RequireEnv, HideEnv} {
		if _, unknown := listed(env, ""); len(unknown) > 0 {
			t.Fatalf("testenv: %s=%s names %s, which is no component (known: all, %s)", env, os.Getenv(env), strings.Join(unknown, ", "), strings.Join(names(), ", "))
		}
	}
}

// Inapplicable skips a test that does not apply here for a reason that is
// no missing component (a provider that cannot checkpoint skips the fork
// tests of the conformance suite; an engine on TCP skips a unix-socket
// proxy). Its first line has a fixed form that skipreport lists apart:
//
//	testenv: not applicable: REASON
//
// A skip for a component that could be installed is Missing's, never this.
func Inapplicable(t testing.TB, reason string) {
	t.Helper()
	t.Skipf("testenv: not applicable: %s", strings.ReplaceAll(strings.TrimSpace(reason), "\n", " "))
}

// NeedDocker ends the test unless a Docker engine answers (at DOCKER_HOST,
// else the default socket) and has forkline/busybox, the image the docker
// provider's tests start from.
func NeedDocker(t testing.TB) {
	t.Helper()
	NeedDockerImage(t, Docker, "forkline/busybox")
}

// NeedDockerImage ends the test unless a Docker engine answers and has image;
// the image's absence is component's (docker-chromium, docker-debian, or
// docker for forkline/busybox).
func NeedDockerImage(t testing.TB, component, image string) {
	t.Helper()
	Need(t, Docker, PingDocker)
	Need(t, component, func() error { return dockerImage(image) })
}

// dockerTimeout bounds one probe of the engine.
const dockerTimeout = 10 * time.Second

// dockerClient is an HTTP client of the engine DOCKER_HOST names (unix:// or
// tcp://), else of /var/run/docker.sock, and its base URL.
func dockerClient() (*http.Client, string, error) {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	u, err := url.Parse(host)
	if err != nil {
		return nil, "", fmt.Errorf("DOCKER_HOST=%s: %w", host, err)
	}
	switch u.Scheme {
	case "unix":
		path := u.Path
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		return &http.Client{Transport: tr, Timeout: dockerTimeout}, "http://docker", nil
	case "tcp":
		return &http.Client{Timeout: dockerTimeout}, "http://" + u.Host, nil
	}
	return nil, "", fmt.Errorf("DOCKER_HOST=%s: testenv probes unix:// and tcp:// engines only", host)
}

// PingDocker is nil when a Docker engine answers GET /_ping.
func PingDocker() error {
	hc, base, err := dockerClient()
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(base + "/_ping")
	if err != nil {
		return fmt.Errorf("no Docker engine answers: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the Docker engine answers %s to GET /_ping", resp.Status)
	}
	return nil
}

func dockerImage(image string) error {
	hc, base, err := dockerClient()
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(base + "/images/" + url.PathEscape(image) + "/json")
	if err != nil {
		return fmt.Errorf("asking the engine for image %s: %v", image, err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusNotFound:
		return fmt.Errorf("the engine has no image %s", image)
	}
	return fmt.Errorf("the engine answers %s for image %s", resp.Status, image)
}

// ChromiumEnv names the environment variable that overrides the Chromium
// binary (the browser provider's FORKLINE_CHROMIUM).
const ChromiumEnv = "FORKLINE_CHROMIUM"

// ChromiumPath is the Chromium binary the tests run: $FORKLINE_CHROMIUM,
// else Debian's /usr/bin/chromium.
func ChromiumPath() string {
	if p := os.Getenv(ChromiumEnv); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// NeedChromium ends the test unless Chromium (ChromiumPath) is installed,
// and returns its path.
func NeedChromium(t testing.TB) string {
	t.Helper()
	exe := ChromiumPath()
	Need(t, Chromium, func() error {
		_, err := exec.LookPath(exe)
		return err
	})
	return exe
}

// NeedValidators ends the test unless /usr/bin/python3 imports jsonschema
// and yaml (Validators), and returns the interpreter's path.
func NeedValidators(t testing.TB) string {
	t.Helper()
	const python = "/usr/bin/python3"
	Need(t, Validators, func() error {
		out, err := exec.Command(python, "-c", "import jsonschema, yaml").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s cannot import jsonschema and yaml: %v %s", python, err, strings.TrimSpace(string(out)))
		}
		return nil
	})
	return python
}

// NeedTmux ends the test unless tmux (the terminal actions' terminal) is
// on PATH.
func NeedTmux(t testing.TB) {
	t.Helper()
	Need(t, Tmux, func() error {
		_, err := exec.LookPath("tmux")
		return err
	})
}

// NeedRoot ends the test unless it runs as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	Need(t, Root, func() error {
		if uid := os.Geteuid(); uid != 0 {
			return fmt.Errorf("running as uid %d", uid)
		}
		return nil
	})
}

// NeedGvisor ends the test unless runsc (Debian's gVisor) is installed and
// the test runs as root (runsc here runs sandboxes as root), and returns
// runsc's path.
func NeedGvisor(t testing.TB) string {
	t.Helper()
	var path string
	Need(t, Gvisor, func() error {
		p, err := exec.LookPath("runsc")
		if err != nil {
			return fmt.Errorf("runsc is not installed (apt-get install runsc): %v", err)
		}
		if uid := os.Geteuid(); uid != 0 {
			return fmt.Errorf("runsc runs sandboxes as root, and the test runs as uid %d", uid)
		}
		path = p
		return nil
	})
	return path
}

// NeedDockerRuntime ends the test unless a Docker engine answers and has
// the runtime called name registered (docker info's Runtimes); its absence
// is component's (docker-runsc for runsc).
func NeedDockerRuntime(t testing.TB, component, name string) {
	t.Helper()
	Need(t, Docker, PingDocker)
	Need(t, component, func() error { return dockerRuntime(name) })
}

func dockerRuntime(name string) error {
	hc, base, err := dockerClient()
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(base + "/info")
	if err != nil {
		return fmt.Errorf("asking the engine for its runtimes: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the engine answers %s to GET /info", resp.Status)
	}
	var info struct {
		Runtimes map[string]json.RawMessage
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return fmt.Errorf("reading the engine's GET /info: %v", err)
	}
	if _, ok := info.Runtimes[name]; !ok {
		known := make([]string, 0, len(info.Runtimes))
		for k := range info.Runtimes {
			known = append(known, k)
		}
		slices.Sort(known)
		return fmt.Errorf("the engine has no runtime named %s (it has: %s; start dockerd with --add-runtime %s=PATH, or register it in /etc/docker/daemon.json)", name, strings.Join(known, ", "), name)
	}
	return nil
}
