// Package task owns task specs: the YAML a user writes (id, instruction,
// files, setup, start, verify, limits, an optional scripted solution), its
// strict parsing with errors that name file, line and field, its content hash,
// and verification, which turns a verify command's result into a reward.
//
// It is consumer-side: it imports runtime to speak in actions and sessions,
// and knows nothing of providers, pools or dataset files. Rewards leave this
// package as plain values; the collector attaches them out-of-band.
package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forkline/forkline/runtime"
)

// Spec is one task.
type Spec struct {
	ID          string            `json:"id"`
	Instruction string            `json:"instruction"`
	Image       string            `json:"image,omitempty"` // for providers with images (docker)
	Files       map[string]string `json:"files,omitempty"` // workspace-relative path → content
	Env         map[string]string `json:"env,omitempty"`
	Setup       []string          `json:"setup,omitempty"` // run once, into the golden checkpoint
	Start       []string          `json:"start,omitempty"` // run in every fork after it starts
	Verify      *Verify           `json:"verify,omitempty"`
	Limits      Limits            `json:"limits"`
	Solution    []runtime.Action  `json:"solution,omitempty"` // scripted actions for policy/script
	// Browser, when set, gives every sandbox of the task a headless browser
	// beside it (package browser): GUI actions go to the browser, the rest
	// to the sandbox. Nil for shell-only tasks, and then absent from the
	// JSON, so their hashes do not change.
	Browser *Browser `json:"browser,omitempty"`
	// Actions are the shell actions the task allows (ShellActions); nil
	// allows every shell action in a task without a browser and none in a
	// browser task (see AllowedActions). Absent from the JSON when nil, so
	// the hashes of tasks without it do not change.
	Actions []runtime.ActionKind `json:"actions,omitempty"`

	// Source is where the spec was read from ("tasks/fix.yaml:1"); it is not
	// part of the spec's identity or hash.
	Source string `json:"-"`
}

// ShellActions are the actions a sandbox runs without a browser; GUIActions
// those a browser task's browser runs.
var (
	ShellActions = []runtime.ActionKind{runtime.ActExec, runtime.ActReadFile, runtime.ActWriteFile}
	GUIActions   = []runtime.ActionKind{runtime.ActClick, runtime.ActKey, runtime.ActNavigate,
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
	// Reward is "exit" (1 when the command exits 0, else 0) or "number"
	// (the last number the command prints; a missing number is no reward).
	Reward    string `json:"reward"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
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
		v.Reward = "exit"
		s.Verify = &v
	}
	return s
}

// Hash is the hex sha256 of the spec's canonical JSON (defaults applied, Source
// excluded). Two specs with the same hash set up and verify the same way;
// editing anything in a task changes its hash and therefore its episode ids.
func (s Spec) Hash() string {
	b, err := json.Marshal(s.WithDefaults())
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
}

var numberRE = regexp.MustCompile(`[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?`)

// maxDetail bounds the verifier output kept with a reward.
const maxDetail = 2048

// Run runs the verify command in s and computes the reward. A failing command
// is a result, not an error; the error is for a session that broke.
func (v Verify) Run(ctx context.Context, s runtime.Session) (Reward, error) {
	timeout := v.TimeoutMS
	if timeout <= 0 {
		timeout = DefaultVerifyTimeout.Milliseconds()
	}
	began := time.Now()
	obs, err := s.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: v.Cmd, TimeoutMS: timeout})
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
	case "number":
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
	default: // "exit"
		f := 0.0
		if obs.ExitCode == 0 {
			f = 1
		}
		r.Value = &f
	}
	return r, nil
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
