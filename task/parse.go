package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/forkline/forkline/internal/linuxcap"
	"github.com/forkline/forkline/runtime"
)

// ErrSpec is wrapped by every error about a malformed task file.
var ErrSpec = errors.New("invalid task spec")

// SpecError locates a problem in a task file.
type SpecError struct {
	File  string
	Line  int
	Col   int
	Field string // dotted path, e.g. "limits.max_steps" or "solution[2].cmd"
	Msg   string
}

func (e *SpecError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Col)
	}
	if e.Field != "" {
		return fmt.Sprintf("task: %s: field %s: %s", loc, e.Field, e.Msg)
	}
	return fmt.Sprintf("task: %s: %s", loc, e.Msg)
}

func (e *SpecError) Unwrap() error { return ErrSpec }

// Load reads task specs from a file or from every *.yaml / *.yml file of a
// directory (sorted by name, not recursive). A file may hold several specs as
// YAML documents separated by "---". Task ids must be unique across the set.
func Load(path string) ([]Spec, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("task: %w", err)
	}
	files := []string{path}
	if st.IsDir() {
		files = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("task: %w", err)
		}
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("task: %s holds no *.yaml or *.yml files", path)
		}
	}
	var out []Spec
	seen := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("task: %w", err)
		}
		specs, err := Parse(f, data)
		if err != nil {
			return nil, err
		}
		for _, s := range specs {
			if prev, dup := seen[s.ID]; dup {
				return nil, fmt.Errorf("task: %s: %w: task id %q already defined at %s", s.Source, ErrSpec, s.ID, prev)
			}
			seen[s.ID] = s.Source
			out = append(out, s)
		}
	}
	return out, nil
}

// Parse reads every YAML document of data as a task spec. name is used in
// errors. Unknown fields, wrong types and missing required fields are errors
// naming the line and field.
func Parse(name string, data []byte) ([]Spec, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []Spec
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, syntaxError(name, err)
		}
		if len(doc.Content) == 0 {
			continue
		}
		p := parser{file: name}
		s, err := p.spec(doc.Content[0])
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, &SpecError{File: name, Msg: "no task in file"}
	}
	return out, nil
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

func syntaxError(name string, err error) error {
	e := &SpecError{File: name, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		fmt.Sscanf(m[1], "%d", &e.Line)
		e.Col = 1
		e.Msg = strings.TrimLeft(yamlLineRE.ReplaceAllString(e.Msg, ""), ": ")
	}
	return e
}

type parser struct{ file string }

func (p parser) errAt(n *yaml.Node, field, format string, args ...any) error {
	return &SpecError{File: p.file, Line: n.Line, Col: n.Column, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// fields walks a mapping node, calling fn for every key, and rejects keys not
// in known, listing the known ones.
func (p parser) fields(n *yaml.Node, path string, known []string, fn func(key string, val *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return p.errAt(n, path, "must be a mapping, not %s", kindName(n))
	}
	ok := map[string]bool{}
	for _, k := range known {
		ok[k] = true
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := join(path, k.Value)
		if !ok[k.Value] {
			sorted := append([]string(nil), known...)
			sort.Strings(sorted)
			return p.errAt(k, field, "unknown field (known: %s)", strings.Join(sorted, ", "))
		}
		if seen[k.Value] {
			return p.errAt(k, field, "appears twice")
		}
		seen[k.Value] = true
		if err := fn(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the scalar %q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "empty"
}

func (p parser) decode(n *yaml.Node, field string, v any) error {
	if err := n.Decode(v); err != nil {
		msg := err.Error()
		msg = strings.TrimPrefix(msg, "yaml: unmarshal errors:\n  ")
		msg = yamlLineRE.ReplaceAllString(msg, "")
		msg = strings.TrimLeft(msg, ": ")
		return p.errAt(n, field, "%s", msg)
	}
	return nil
}

func (p parser) str(n *yaml.Node, field string, dst *string) error {
	if n.Kind != yaml.ScalarNode {
		return p.errAt(n, field, "must be a string, not %s", kindName(n))
	}
	return p.decode(n, field, dst)
}

func (p parser) strList(n *yaml.Node, field string, dst *[]string) error {
	if n.Kind != yaml.SequenceNode {
		return p.errAt(n, field, "must be a list of commands, not %s", kindName(n))
	}
	for i, c := range n.Content {
		var s string
		if err := p.str(c, fmt.Sprintf("%s[%d]", field, i), &s); err != nil {
			return err
		}
		if strings.TrimSpace(s) == "" {
			return p.errAt(c, fmt.Sprintf("%s[%d]", field, i), "empty command")
		}
		*dst = append(*dst, s)
	}
	return nil
}

func (p parser) duration(n *yaml.Node, field string, dst *Duration) error {
	var s string
	if err := p.str(n, field, &s); err != nil {
		return err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return p.errAt(n, field, "%q is not a positive duration such as 30s or 5m", s)
	}
	*dst = Duration(d)
	return nil
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

var specFields = []string{"id", "instruction", "image", "files", "env", "setup", "start", "verify", "limits", "solution", "browser"}

func (p parser) spec(n *yaml.Node) (Spec, error) {
	s := Spec{Source: fmt.Sprintf("%s:%d", p.file, n.Line)}
	err := p.fields(n, "", specFields, func(key string, v *yaml.Node) error {
		switch key {
		case "id":
			if err := p.str(v, key, &s.ID); err != nil {
				return err
			}
			if !idRE.MatchString(s.ID) {
				return p.errAt(v, key, "%q must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", s.ID)
			}
		case "instruction":
			return p.str(v, key, &s.Instruction)
		case "image":
			return p.str(v, key, &s.Image)
		case "files":
			return p.files(v, &s)
		case "env":
			if v.Kind != yaml.MappingNode {
				return p.errAt(v, key, "must be a mapping of NAME: value, not %s", kindName(v))
			}
			return p.decode(v, key, &s.Env)
		case "setup":
			return p.strList(v, key, &s.Setup)
		case "start":
			return p.strList(v, key, &s.Start)
		case "verify":
			return p.verify(v, &s)
		case "limits":
			return p.limits(v, &s.Limits)
		case "solution":
			return p.solution(v, &s)
		case "browser":
			return p.browser(v, &s)
		}
		return nil
	})
	if err != nil {
		return Spec{}, err
	}
	if s.ID == "" {
		return Spec{}, p.errAt(n, "id", "missing (every task needs an id)")
	}
	if strings.TrimSpace(s.Instruction) == "" {
		return Spec{}, p.errAt(n, "instruction", "missing (tell the agent what to do)")
	}
	return s, nil
}

func (p parser) files(v *yaml.Node, s *Spec) error {
	if v.Kind != yaml.MappingNode {
		return p.errAt(v, "files", "must be a mapping of path: content, not %s", kindName(v))
	}
	s.Files = map[string]string{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, c := v.Content[i], v.Content[i+1]
		field := "files." + k.Value
		if k.Value == "" || strings.HasPrefix(k.Value, "/") || strings.Contains(k.Value, "..") {
			return p.errAt(k, field, "path must be relative and stay inside the workspace")
		}
		var content string
		if err := p.str(c, field, &content); err != nil {
			return err
		}
		s.Files[k.Value] = content
	}
	return nil
}

func (p parser) verify(v *yaml.Node, s *Spec) error {
	ver := &Verify{}
	// A bare string is the command with the default reward rule.
	if v.Kind == yaml.ScalarNode {
		if err := p.str(v, "verify", &ver.Cmd); err != nil {
			return err
		}
	} else {
		err := p.fields(v, "verify", []string{"cmd", "reward", "timeout"}, func(key string, n *yaml.Node) error {
			switch key {
			case "cmd":
				return p.str(n, "verify.cmd", &ver.Cmd)
			case "reward":
				if err := p.str(n, "verify.reward", &ver.Reward); err != nil {
					return err
				}
				if ver.Reward != "exit" && ver.Reward != "number" {
					return p.errAt(n, "verify.reward", "%q is not a reward rule (known: exit, number)", ver.Reward)
				}
			case "timeout":
				var d Duration
				if err := p.duration(n, "verify.timeout", &d); err != nil {
					return err
				}
				ver.TimeoutMS = time.Duration(d).Milliseconds()
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if strings.TrimSpace(ver.Cmd) == "" {
		return p.errAt(v, "verify.cmd", "missing")
	}
	s.Verify = ver
	return nil
}

func (p parser) limits(v *yaml.Node, l *Limits) error {
	known := []string{"max_steps", "action_timeout", "episode_timeout", "output_cap", "cpus", "memory_mb", "pids", "capabilities"}
	return p.fields(v, "limits", known, func(key string, n *yaml.Node) error {
		field := "limits." + key
		positive := func(x float64) error {
			if x <= 0 {
				return p.errAt(n, field, "must be positive")
			}
			return nil
		}
		switch key {
		case "max_steps":
			if err := p.decode(n, field, &l.MaxSteps); err != nil {
				return err
			}
			return positive(float64(l.MaxSteps))
		case "action_timeout":
			return p.duration(n, field, &l.ActionTimeout)
		case "episode_timeout":
			return p.duration(n, field, &l.EpisodeTimeout)
		case "output_cap":
			if err := p.decode(n, field, &l.OutputCap); err != nil {
				return err
			}
			return positive(float64(l.OutputCap))
		case "cpus":
			if err := p.decode(n, field, &l.CPUs); err != nil {
				return err
			}
			return positive(l.CPUs)
		case "memory_mb":
			if err := p.decode(n, field, &l.MemoryMB); err != nil {
				return err
			}
			return positive(float64(l.MemoryMB))
		case "pids":
			if err := p.decode(n, field, &l.Pids); err != nil {
				return err
			}
			return positive(float64(l.Pids))
		case "capabilities":
			return p.capabilities(n, field, &l.Capabilities)
		}
		return nil
	})
}

// capabilities reads limits.capabilities: Linux capability names the
// sandbox may use beyond its provider's default set, stored canonical
// (NET_RAW for cap_net_raw) and sorted, so the spelling and order do not
// change the spec's hash.
func (p parser) capabilities(n *yaml.Node, field string, dst *[]string) error {
	if n.Kind != yaml.SequenceNode {
		return p.errAt(n, field, "must be a list of capability names such as [NET_RAW], not %s", kindName(n))
	}
	var out []string
	for i, c := range n.Content {
		item := fmt.Sprintf("%s[%d]", field, i)
		var name string
		if err := p.str(c, item, &name); err != nil {
			return err
		}
		canon, err := linuxcap.Canonical(name)
		if err != nil {
			return p.errAt(c, item, "%s", strings.TrimPrefix(err.Error(), "linuxcap: "))
		}
		if slices.Contains(out, canon) {
			return p.errAt(c, item, "%s is listed twice", canon)
		}
		out = append(out, canon)
	}
	slices.Sort(out)
	*dst = out
	return nil
}

// solution reads the scripted actions, each in the canonical action form
// ({kind: exec, cmd: ...}), and reports the line of a bad one.
func (p parser) solution(v *yaml.Node, s *Spec) error {
	if v.Kind != yaml.SequenceNode {
		return p.errAt(v, "solution", "must be a list of actions, not %s", kindName(v))
	}
	for i, item := range v.Content {
		field := fmt.Sprintf("solution[%d]", i)
		if item.Kind != yaml.MappingNode {
			return p.errAt(item, field, "must be an action such as {kind: exec, cmd: ls}, not %s", kindName(item))
		}
		var m map[string]any
		if err := p.decode(item, field, &m); err != nil {
			return err
		}
		raw, err := json.Marshal(m)
		if err != nil {
			return p.errAt(item, field, "%v", err)
		}
		var a runtime.Action
		if err := json.Unmarshal(raw, &a); err != nil {
			return p.errAt(item, field, "%s", strings.TrimPrefix(err.Error(), "runtime: "))
		}
		s.Solution = append(s.Solution, a)
	}
	return nil
}

// Bounds of a browser viewport, in CSS pixels.
const (
	minViewport = 64
	maxViewport = 4096
)

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

var viewportRE = regexp.MustCompile(`^([0-9]{1,5})x([0-9]{1,5})$`)

// browser reads the optional browser section. An empty mapping (browser: {})
// asks for a browser with every default.
func (p parser) browser(v *yaml.Node, s *Spec) error {
	b := &Browser{}
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		s.Browser = b
		return nil
	}
	known := []string{"viewport", "start", "observe", "load_timeout"}
	err := p.fields(v, "browser", known, func(key string, n *yaml.Node) error {
		field := "browser." + key
		switch key {
		case "viewport":
			var vp string
			if err := p.str(n, field, &vp); err != nil {
				return err
			}
			m := viewportRE.FindStringSubmatch(vp)
			if m == nil {
				return p.errAt(n, field, "%q is not WIDTHxHEIGHT in pixels, such as 1280x800", vp)
			}
			fmt.Sscan(m[1], &b.Width)
			fmt.Sscan(m[2], &b.Height)
			if b.Width < minViewport || b.Height < minViewport || b.Width > maxViewport || b.Height > maxViewport {
				return p.errAt(n, field, "%s is out of range (each side %d to %d pixels)", vp, minViewport, maxViewport)
			}
		case "start":
			if err := p.str(n, field, &b.Start); err != nil {
				return err
			}
			if msg := checkStartPage(b.Start); msg != "" {
				return p.errAt(n, field, "%q %s", b.Start, msg)
			}
		case "observe":
			if err := p.str(n, field, &b.Observe); err != nil {
				return err
			}
			for _, m := range BrowserObserveModes {
				if b.Observe == m {
					return nil
				}
			}
			return p.errAt(n, field, "%q is not known (known: %s)", b.Observe, strings.Join(BrowserObserveModes, ", "))
		case "load_timeout":
			return p.duration(n, field, &b.LoadTimeout)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.Browser = b
	return nil
}

// checkStartPage says what is wrong with a start page, or "" when it is one
// the browser may open: a workspace-relative path, a loopback http(s) URL or
// about:blank. The browser has no other network (package browser).
func checkStartPage(start string) string {
	switch {
	case strings.TrimSpace(start) == "":
		return "is empty"
	case start == "about:blank":
		return ""
	case strings.HasPrefix(start, "http://") || strings.HasPrefix(start, "https://"):
		host := strings.SplitN(strings.SplitN(start, "://", 2)[1], "/", 2)[0]
		if i := strings.LastIndex(host, ":"); i >= 0 && !strings.HasSuffix(host, "]") {
			host = host[:i]
		}
		if host == "localhost" || host == "[::1]" || host == "127.0.0.1" {
			return ""
		}
		return "is not a loopback URL (localhost, 127.0.0.1, [::1]): the browser reaches only the workspace and loopback"
	case schemeRE.MatchString(start):
		return "must be a workspace-relative path, a loopback http(s) URL or about:blank"
	case strings.HasPrefix(start, "/"):
		return "must be relative to the workspace"
	}
	for _, seg := range strings.Split(strings.SplitN(strings.SplitN(start, "?", 2)[0], "#", 2)[0], "/") {
		if seg == ".." {
			return "must stay inside the workspace"
		}
	}
	return ""
}
