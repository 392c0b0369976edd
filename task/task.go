// Package task owns task specs: the YAML a user writes (id, instruction,
// files, setup, start, verify, limits, an optional scripted solution) and
// Harbor task folders (task.toml, instruction.md, environment/, tests/,
// solution/; see harbor.go), their strict parsing with errors that name
// file, line and field, their content hash, and verification, which turns a
// verify command's result — its exit code, the number it prints, or the
// reward files a Harbor test.sh writes — into rewards.
//
// It is consumer-side: it imports runtime to speak in actions and sessions,
// and knows nothing of providers, pools or dataset files. It describes the
// hidden verifier files a task has and where they go; the episode runner
// places them in the sandbox after the episode, then calls Verify.Run.
// Rewards leave this package as plain values; the collector attaches them
// out-of-band.
package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/forkline/forkline/runtime"
)

// Spec is one task. Fields added after the first release are omitempty, so
// a spec that does not use them hashes as it always did.
type Spec struct {
	ID          string `json:"id"`
	Instruction string `json:"instruction"`
	Image       string `json:"image,omitempty"` // for providers with images (docker)
	// Build, when set, makes the task's image from a Dockerfile instead of
	// naming one (Image is then empty).
	Build *Build            `json:"build,omitempty"`
	Files map[string]string `json:"files,omitempty"` // workspace-relative path → content
	// BinaryFiles are files of the workspace whose content is not UTF-8
	// text (read from a path: files: {name: {path: ...}}); JSON keeps them
	// as base64. A name is in Files or here, never both.
	BinaryFiles map[string][]byte `json:"binary_files,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	// Network is where the task's sandboxes may connect; nil is the
	// provider's default (none: no network at all).
	Network *Network `json:"network,omitempty"`
	Setup   []string `json:"setup,omitempty"` // run once, into the golden checkpoint
	Start   []string `json:"start,omitempty"` // run in every fork after it starts
	// BranchStart is run in every branch (a fork of a checkpoint taken in
	// the middle of an episode, collect -branch) after it starts, instead
	// of Start: a branch carries the parent's files, not its processes, and
	// Start was written for the golden's state. Empty runs nothing.
	BranchStart []string         `json:"branch_start,omitempty"`
	Verify      *Verify          `json:"verify,omitempty"`
	Limits      Limits           `json:"limits"`
	Solution    []runtime.Action `json:"solution,omitempty"` // scripted actions for policy/script
	// Browser, when set, gives every sandbox of the task a headless browser
	// beside it (package browser): GUI actions go to the browser, the rest
	// to the sandbox. Nil for shell-only tasks, and then absent from the
	// JSON, so their hashes do not change.
	Browser *Browser `json:"browser,omitempty"`
	// Metadata is the task's free-form metadata (metadata: in YAML, the
	// [metadata] and [task] tables of a Harbor task.toml) as a canonical
	// JSON object: kept in the manifest and on every episode row, never read
	// by forkline.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Compose, when set, starts services beside the task's sandbox (a
	// Harbor task's environment/docker-compose.yaml; see compose.go). Nil
	// for a single-container task, and then absent from the JSON.
	Compose *Compose `json:"compose,omitempty"`
	// Harbor is set for a task read from a Harbor task folder.
	Harbor *Harbor `json:"harbor,omitempty"`
	// Actions are the shell actions the task allows (ShellActions); nil
	// allows every shell action in a task without a browser and none in a
	// browser task (see AllowedActions). Absent from the JSON when nil, so
	// the hashes of tasks without it do not change.
	Actions []runtime.ActionKind `json:"actions,omitempty"`
	// Shell is how exec runs the task's commands: "" (fresh, a shell per
	// command) or "persistent" (one shell per episode: the directory,
	// variables and background jobs carry from one command to the next).
	// Absent from the JSON when "", so the hashes of other tasks do not
	// change.
	Shell string `json:"shell,omitempty"`

	// Source is where the spec was read from ("tasks/fix.yaml:1"); it is not
	// part of the spec's identity or hash.
	Source string `json:"-"`
}

// Build says how a task's image is built from a Dockerfile: by a provider
// with images, once per distinct build (its content, not its path, names
// it), before the first episode.
type Build struct {
	// Context is the build context, an absolute directory on the host. It
	// is recorded but not part of the spec's hash: moving a task suite does
	// not change its episodes; ContextDigest says what the context holds.
	Context string `json:"context"`
	// Dockerfile is the Dockerfile's path inside Context ("Dockerfile" when
	// empty).
	Dockerfile string            `json:"dockerfile,omitempty"`
	Args       map[string]string `json:"args,omitempty"`   // build arguments (ARG)
	Target     string            `json:"target,omitempty"` // the stage to build
	// ContextDigest is the sha256 of every file of Context (names, modes,
	// contents, symlink targets), so an edited context changes the task's
	// hash and its episode ids.
	ContextDigest string `json:"context_digest"`
	// Timeout bounds the build; zero is the provider's default.
	Timeout Duration `json:"timeout,omitempty"`
}

// DefaultDockerfile is the Dockerfile's name when Build.Dockerfile is empty.
const DefaultDockerfile = "Dockerfile"

// Network is a task's network, by provider network mode name ("none",
// "host", "bridge", a network's name on docker).
type Network struct {
	// Episode is the network of every sandbox an episode runs in.
	Episode string `json:"episode"`
	// Setup is the network of the sandbox the setup commands run in, which
	// becomes the golden checkpoint ("" = Episode): a golden may install
	// packages while its episodes stay offline.
	Setup string `json:"setup,omitempty"`
}

// NetworkNone is the network mode of a sandbox with no network.
const NetworkNone = "none"

// Harbor describes where a task read from a Harbor task folder came from.
type Harbor struct {
	// SchemaVersion is task.toml's schema_version (or its old spelling,
	// version), normalized: "1.0" when it gives none.
	SchemaVersion string `json:"schema_version"`
	// Digest is the sha256 of every file of the task folder (names, modes,
	// contents, symlink targets): editing any file of it — a test, a
	// fixture, the Dockerfile, a README — changes the task's hash and so
	// its episode ids.
	Digest string `json:"digest"`
}

// ShellActions are the actions a sandbox runs without a browser; GUIActions
// those a browser task's browser runs.
var (
	ShellActions = []runtime.ActionKind{runtime.ActExec, runtime.ActReadFile, runtime.ActWriteFile}
	// TerminalActions drive a program on the sandbox's terminal. A task
	// offers them only when its actions list names them: tools a model
	// is offered by default stay those of a shell.
	TerminalActions = []runtime.ActionKind{runtime.ActSendKeys, runtime.ActReadScreen}
	GUIActions      = []runtime.ActionKind{runtime.ActClick, runtime.ActKey, runtime.ActNavigate,
		runtime.ActScreenshot, runtime.ActScroll, runtime.ActType, runtime.ActWait}
)

// AllowedActions are the actions an episode of the task may take, in
// runtime.ActionKinds order: done always; a task without a browser its
// Actions (every shell action when nil); a browser task the GUI actions
// and the shell actions its Actions list (none when nil) — a model is
// offered tools that fit the task, not every tool there is.
func (s *Spec) AllowedActions() []runtime.ActionKind {
	var out []runtime.ActionKind
	for _, k := range runtime.ActionKinds() {
		switch {
		case k == runtime.ActDone:
		case slices.Contains(ShellActions, k):
			if s.Actions == nil {
				if s.Browser != nil {
					continue
				}
			} else if !slices.Contains(s.Actions, k) {
				continue
			}
		case slices.Contains(GUIActions, k):
			if s.Browser == nil {
				continue
			}
		case slices.Contains(TerminalActions, k):
			if !slices.Contains(s.Actions, k) {
				continue
			}
		default:
			continue // an action kind this build does not place: never offered
		}
		out = append(out, k)
	}
	return out
}

// Verify says how an episode's outcome becomes a reward.
type Verify struct {
	Cmd string `json:"cmd"`
	// Reward is "exit" (1 when the command exits 0, else 0), "number"
	// (the last number the command prints; a missing number is no reward)
	// or "harbor" (Harbor's reward files: /logs/verifier/reward.json, else
	// /logs/verifier/reward.txt; see RewardHarbor).
	Reward    string `json:"reward"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	// Files, BinaryFiles and Executable are the hidden verifier files:
	// absent while the episode runs, so the agent can neither read nor
	// rewrite them, and placed under Dir after it, before Cmd runs (the
	// episode runner does it). Files are UTF-8 text, BinaryFiles anything
	// else; Executable names those placed with mode 0755 (else 0644).
	Files       map[string]string `json:"files,omitempty"`
	BinaryFiles map[string][]byte `json:"binary_files,omitempty"`
	Executable  []string          `json:"executable,omitempty"`
	// Dir is where the hidden files go: "" for the workspace, or an
	// absolute path in the sandbox (/tests for a Harbor task), which only a
	// provider whose sandboxes have a filesystem of their own can honour.
	Dir string `json:"dir,omitempty"`
	// Clear are absolute directories emptied (and made) after the episode,
	// before the hidden files go in: Harbor's /tests and /logs/verifier, so
	// that nothing the agent left there counts.
	Clear []string `json:"clear,omitempty"`
	// Env is extra environment of the verify command only; a value may be
	// ${NAME} or ${NAME:-default}, taken from forkline's environment when
	// the verifier runs and never recorded (ExpandEnv).
	Env map[string]string `json:"env,omitempty"`
}

// The reward rules of Verify.Reward.
const (
	RewardExit   = "exit"
	RewardNumber = "number"
	// RewardHarbor reads what Harbor's verifier contract has test.sh
	// write: /logs/verifier/reward.json, a JSON object whose "reward" key is
	// the reward and whose other keys are further metrics (each its own
	// reward row), or else /logs/verifier/reward.txt, a single number.
	RewardHarbor = "harbor"
)

// HarborRewardDir is where a Harbor test.sh writes its reward files.
const HarborRewardDir = "/logs/verifier"

// HiddenFile is one hidden verifier file as it is placed.
type HiddenFile struct {
	Path       string // relative to Verify.Dir
	Data       []byte
	Executable bool
}

// HiddenFiles lists the hidden verifier files, sorted by path.
func (v Verify) HiddenFiles() []HiddenFile {
	exe := map[string]bool{}
	for _, p := range v.Executable {
		exe[p] = true
	}
	out := make([]HiddenFile, 0, len(v.Files)+len(v.BinaryFiles))
	for p, c := range v.Files {
		out = append(out, HiddenFile{Path: p, Data: []byte(c), Executable: exe[p]})
	}
	for p, c := range v.BinaryFiles {
		out = append(out, HiddenFile{Path: p, Data: c, Executable: exe[p]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// ClearCommand is the command that empties and makes v.Clear, or "" when
// there is nothing to clear.
func (v Verify) ClearCommand() string {
	if len(v.Clear) == 0 {
		return ""
	}
	q := make([]string, len(v.Clear))
	for i, d := range v.Clear {
		q[i] = ShellQuote(d)
	}
	dirs := strings.Join(q, " ")
	return "rm -rf -- " + dirs + " && mkdir -p -- " + dirs
}

// ShellQuote quotes s for a POSIX shell: one word, nothing expanded.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Browser is the browser section of a task: what the browser beside the
// sandbox looks like and what each GUI step observes. The task package only
// describes it; package browser runs it.
type Browser struct {
	// Width and Height are the viewport in CSS pixels; screenshots have
	// exactly this size and click coordinates use the same space.
	Width  int `json:"width"`
	Height int `json:"height"`
	// Start is the page the browser opens when it starts: a
	// workspace-relative path (index.html), a loopback http(s) URL, or
	// about:blank.
	Start string `json:"start"`
	// Observe is what each GUI action's observation carries:
	// "screenshot+a11y", "screenshot", "a11y" or "none". A screenshot
	// action always carries a screenshot.
	Observe string `json:"observe"`
	// LoadTimeout bounds how long a navigation waits for its page to load.
	LoadTimeout Duration `json:"load_timeout"`
}

// Browser defaults applied by WithDefaults.
const (
	DefaultViewportWidth  = 1280
	DefaultViewportHeight = 800
	DefaultBrowserStart   = "about:blank"
	DefaultBrowserObserve = "screenshot+a11y"
	DefaultLoadTimeout    = 10 * time.Second
)

// BrowserObserveModes lists the values Browser.Observe accepts.
var BrowserObserveModes = []string{"screenshot+a11y", "screenshot", "a11y", "none"}

// Limits bound each episode and sandbox of the task.
type Limits struct {
	MaxSteps       int      `json:"max_steps,omitempty"`
	ActionTimeout  Duration `json:"action_timeout,omitempty"`
	EpisodeTimeout Duration `json:"episode_timeout,omitempty"`
	OutputCap      int      `json:"output_cap,omitempty"` // bytes kept per action output
	CPUs           float64  `json:"cpus,omitempty"`
	MemoryMB       int64    `json:"memory_mb,omitempty"`
	Pids           int64    `json:"pids,omitempty"`
	// Capabilities are Linux capabilities (NET_RAW, SYS_PTRACE, ...) the
	// sandbox may use beyond its provider's default set; canonical, sorted.
	Capabilities []string `json:"capabilities,omitempty"`
	// StorageMB is the disk a Harbor task asks for ([environment]
	// storage_mb). It is recorded, not enforced: neither provider can bound
	// a sandbox's disk on an ordinary file system (Docker's overlay2 needs
	// XFS with project quotas), and Harbor's own Docker environment does not
	// either. The collector says so when a task sets it.
	StorageMB int64 `json:"storage_mb,omitempty"`
}

// Defaults applied by WithDefaults.
const (
	DefaultMaxSteps       = 30
	DefaultActionTimeout  = 30 * time.Second
	DefaultEpisodeTimeout = 10 * time.Minute
	DefaultVerifyTimeout  = 60 * time.Second
)

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Runtime returns the runtime limits of an episode.
func (l Limits) Runtime() runtime.Limits {
	return runtime.Limits{
		MaxSteps:       l.MaxSteps,
		ActionTimeout:  time.Duration(l.ActionTimeout),
		EpisodeTimeout: time.Duration(l.EpisodeTimeout),
	}
}

// WithDefaults returns s with unset limits filled in.
func (s Spec) WithDefaults() Spec {
	if s.Limits.MaxSteps == 0 {
		s.Limits.MaxSteps = DefaultMaxSteps
	}
	if s.Limits.ActionTimeout == 0 {
		s.Limits.ActionTimeout = Duration(DefaultActionTimeout)
	}
	if s.Limits.EpisodeTimeout == 0 {
		s.Limits.EpisodeTimeout = Duration(DefaultEpisodeTimeout)
	}
	if s.Browser != nil {
		b := *s.Browser
		if b.Width == 0 || b.Height == 0 {
			b.Width, b.Height = DefaultViewportWidth, DefaultViewportHeight
		}
		if b.Start == "" {
			b.Start = DefaultBrowserStart
		}
		if b.Observe == "" {
			b.Observe = DefaultBrowserObserve
		}
		if b.LoadTimeout == 0 {
			b.LoadTimeout = Duration(DefaultLoadTimeout)
		}
		s.Browser = &b
	}
	if s.Verify != nil && s.Verify.Reward == "" {
		v := *s.Verify
		v.Reward = RewardExit
		s.Verify = &v
	}
	return s
}

// Hash is the hex sha256 of the spec's canonical JSON (defaults applied,
// Source and Build.Context excluded: where a task lives is not what it is).
// Two specs with the same hash set up and verify the same way; editing
// anything in a task changes its hash and therefore its episode ids.
func (s Spec) Hash() string {
	s = s.WithDefaults()
	if s.Build != nil {
		b := *s.Build
		b.Context = ""
		s.Build = &b
	}
	if s.Compose != nil {
		// The services' build contexts and copied files are where the task
		// lies; their digests are what they hold.
		c := *s.Compose
		c.Services = slices.Clone(c.Services)
		for i, svc := range c.Services {
			if svc.Build != nil {
				b := *svc.Build
				b.Context = ""
				c.Services[i].Build = &b
			}
			c.Services[i].Copies = slices.Clone(svc.Copies)
			for j := range c.Services[i].Copies {
				c.Services[i].Copies[j].Source = ""
			}
		}
		s.Compose = &c
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic("task: spec does not marshal: " + err.Error()) // all fields are plain data
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Reward is the outcome of verification.
type Reward struct {
	Value    *float64 // nil when the verifier produced none
	ExitCode int
	Detail   string // the verifier's output tail, or why there is no value
	Took     time.Duration
	// Metrics are the further values a Harbor reward.json holds beside its
	// "reward" key, sorted by name; each becomes a reward row of its own.
	Metrics []Metric
}

// Metric is one further value of a reward.json.
type Metric struct {
	Name   string
	Value  *float64 // nil when the value is not a finite number
	Detail string   // why there is no value
}

var numberRE = regexp.MustCompile(`[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?`)

// maxDetail bounds the verifier output kept with a reward.
const maxDetail = 2048

// Run runs the verify command in s and computes the reward. A failing command
// is a result, not an error; the error is for a session that broke, or for
// a ${NAME} in Env that forkline's environment does not hold. The hidden
// files must be in place already (the episode runner puts them there).
func (v Verify) Run(ctx context.Context, s runtime.Session) (Reward, error) {
	timeout := v.TimeoutMS
	if timeout <= 0 {
		timeout = DefaultVerifyTimeout.Milliseconds()
	}
	cmd := v.Cmd
	if len(v.Env) > 0 {
		env, err := ExpandEnv(v.Env)
		if err != nil {
			return Reward{}, fmt.Errorf("task: verify: %w", err)
		}
		// The assignments go into the command, not into the recorded
		// Source of the reward: a value taken from forkline's environment
		// stays out of the dataset.
		cmd = exportLine(env) + cmd
	}
	began := time.Now()
	obs, err := s.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: cmd, TimeoutMS: timeout})
	r := Reward{ExitCode: obs.ExitCode, Took: time.Since(began)}
	if err != nil {
		return r, fmt.Errorf("task: verify: %w", err)
	}
	out := obs.Text()
	r.Detail = tail(out, maxDetail)
	if obs.TimedOut {
		r.Detail = "verify timed out after " + (time.Duration(timeout) * time.Millisecond).String() + "\n" + r.Detail
		return r, nil
	}
	switch v.Reward {
	case RewardNumber:
		nums := numberRE.FindAllString(out, -1)
		if len(nums) == 0 {
			r.Detail = "verify printed no number\n" + r.Detail
			return r, nil
		}
		f, err := strconv.ParseFloat(nums[len(nums)-1], 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			r.Detail = fmt.Sprintf("verify printed %q, not a finite number\n%s", nums[len(nums)-1], r.Detail)
			return r, nil
		}
		r.Value = &f
	case RewardHarbor:
		err := readHarborReward(ctx, s, &r)
		r.Took = time.Since(began)
		return r, err
	default: // "exit"
		f := 0.0
		if obs.ExitCode == 0 {
			f = 1
		}
		r.Value = &f
	}
	return r, nil
}

// exportLine is the shell assignments of env, sorted, ending in "; ".
func exportLine(env map[string]string) string {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("export")
	for _, k := range names {
		b.WriteString(" " + k + "=" + ShellQuote(env[k]))
	}
	b.WriteString("; ")
	return b.String()
}

// readHarborReward reads the reward files a Harbor test.sh wrote, as
// Harbor does: reward.json when it exists, else reward.txt. It keeps the
// command's output tail in r.Detail and says first what it read. Whatever
// test.sh exited with, the files decide: Harbor reads them regardless.
func readHarborReward(ctx context.Context, s runtime.Session, r *Reward) error {
	cat := func(name string) (string, bool, error) {
		obs, err := s.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "cat -- " + ShellQuote(HarborRewardDir+"/"+name), TimeoutMS: 30_000})
		if err != nil {
			return "", false, fmt.Errorf("task: verify: reading %s: %w", name, err)
		}
		return obs.Text(), obs.ExitCode == 0 && !obs.TimedOut, nil
	}
	out := r.Detail
	text, ok, err := cat("reward.json")
	if err != nil {
		return err
	}
	if ok {
		r.Value, r.Metrics, r.Detail = parseRewardJSON(text)
		r.Detail = strings.TrimSpace(r.Detail + "\n" + out)
		return nil
	}
	text, ok, err = cat("reward.txt")
	if err != nil {
		return err
	}
	if !ok {
		r.Detail = "test.sh wrote neither " + HarborRewardDir + "/reward.json nor reward.txt\n" + out
		return nil
	}
	f, perr := strconv.ParseFloat(strings.TrimSpace(text), 64)
	if perr != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		r.Detail = fmt.Sprintf("reward.txt holds %q, not a finite number\n%s", tail(strings.TrimSpace(text), 200), out)
		return nil
	}
	r.Value, r.Detail = &f, "reward.txt\n"+out
	return nil
}

// parseRewardJSON reads a reward.json: an object whose "reward" key is the
// reward and whose other keys are metrics. Without a "reward" key there is
// no reward value, and every key is a metric (as verifiers reads it: each
// its own reward). A key named "verify", the name of the main reward row,
// is not a metric: it would be indistinguishable from it.
func parseRewardJSON(text string) (value *float64, metrics []Metric, detail string) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &obj); err != nil {
		return nil, nil, fmt.Sprintf("reward.json is not a JSON object (%v): %q", err, tail(strings.TrimSpace(text), 200))
	}
	detail = "reward.json"
	if raw, ok := obj["reward"]; ok {
		v, why := finite(raw)
		if why != "" {
			detail = "reward.json: reward " + why
		}
		value = v
	} else {
		detail = "reward.json has no \"reward\" key; its keys are metrics"
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		if k != "reward" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		if k == RewardName {
			detail += "; key \"verify\" is not kept: it is the name of the main reward"
			continue
		}
		v, why := finite(obj[k])
		metrics = append(metrics, Metric{Name: k, Value: v, Detail: why})
	}
	return value, metrics, detail
}

// RewardName is the name of the reward row a task's verifier makes.
const RewardName = "verify"

// finite reads a JSON number (true and false count as 1 and 0, as Python's
// float() of a bool does), or says why raw is not one.
func finite(raw json.RawMessage) (*float64, string) {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		var b bool
		if json.Unmarshal(raw, &b) == nil {
			if b {
				f = 1
			}
			return &f, ""
		}
		return nil, fmt.Sprintf("is %s, not a number", tail(string(raw), 100))
	}
	return &f, ""
}

// envRefRE matches a value that is a reference to forkline's environment:
// ${NAME} or ${NAME:-default}, as Harbor's task.toml writes them.
var envRefRE = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?\}$`)

// ErrEnvUnset is wrapped by ExpandEnv's error for a ${NAME} without a
// default whose NAME forkline's environment does not hold.
var ErrEnvUnset = errors.New("task: environment variable not set")

// ExpandEnv resolves env's values that are ${NAME} or ${NAME:-default}
// from forkline's environment; other values stay as written. The result is
// never recorded: specs keep the references, so a secret taken from the
// environment reaches the sandbox without entering the dataset.
func ExpandEnv(env map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(env))
	var missing []string
	for k, v := range env {
		m := envRefRE.FindStringSubmatch(v)
		if m == nil {
			out[k] = v
			continue
		}
		val, ok := os.LookupEnv(m[1])
		switch {
		case ok:
			out[k] = val
		case strings.Contains(v, ":-"):
			out[k] = m[2]
		default:
			missing = append(missing, fmt.Sprintf("%s=${%s}", k, m[1]))
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("%w: %s (set it, or give a default: ${NAME:-value})", ErrEnvUnset, strings.Join(missing, ", "))
	}
	return out, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	// Do not start in the middle of a UTF-8 sequence.
	for i := 0; i < len(s) && i < 4; i++ {
		if s[i]&0xC0 != 0x80 {
			return "…" + s[i:]
		}
	}
	return "…" + strings.ToValidUTF8(s, "")
}
