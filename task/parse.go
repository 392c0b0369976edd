package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

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

// Load reads task specs from path: a YAML file (which may hold several
// specs as YAML documents separated by "---"), a Harbor task folder (one
// holding task.toml; see LoadHarbor), or a directory of them — its *.yaml
// and *.yml files and its subdirectories that are Harbor task folders,
// sorted by name, not recursive. Task ids must be unique across the set.
func Load(path string) ([]Spec, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("task: %w", err)
	}
	type source struct {
		path   string
		harbor bool
	}
	sources := []source{{path: path}}
	switch {
	case !st.IsDir() && filepath.Base(path) == "task.toml":
		sources = []source{{path: filepath.Dir(path), harbor: true}}
	case st.IsDir() && IsHarborFolder(path):
		sources = []source{{path: path, harbor: true}}
	case st.IsDir():
		sources = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("task: %w", err)
		}
		for _, e := range entries {
			full := filepath.Join(path, e.Name())
			ext := filepath.Ext(e.Name())
			switch {
			case e.IsDir() && IsHarborFolder(full):
				sources = append(sources, source{path: full, harbor: true})
			case !e.IsDir() && (ext == ".yaml" || ext == ".yml"):
				sources = append(sources, source{path: full})
			}
		}
		if len(sources) == 0 {
			return nil, fmt.Errorf("task: %s holds no *.yaml or *.yml files and no Harbor task folders (subdirectories with a task.toml)", path)
		}
	}
	var out []Spec
	seen := map[string]string{}
	for _, src := range sources {
		var specs []Spec
		if src.harbor {
			s, err := LoadHarbor(src.path)
			if err != nil {
				return nil, err
			}
			specs = []Spec{s}
		} else {
			data, err := os.ReadFile(src.path)
			if err != nil {
				return nil, fmt.Errorf("task: %w", err)
			}
			if specs, err = Parse(src.path, data); err != nil {
				return nil, err
			}
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

// NotRead lists the subdirectories of the tasks directory path that Load
// does not read although they hold task files (*.yaml or *.yml): Load is
// not recursive, and only a subdirectory that is a Harbor task folder is a
// task. A path that is not a directory, or that is a Harbor folder, has
// none. Callers say so, so that tasks are never left out silently.
func NotRead(path string) []string {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() || IsHarborFolder(path) {
		return nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		full := filepath.Join(path, e.Name())
		if !e.IsDir() || IsHarborFolder(full) {
			continue
		}
		yamls, _ := filepath.Glob(filepath.Join(full, "*.yaml"))
		ymls, _ := filepath.Glob(filepath.Join(full, "*.yml"))
		if len(yamls)+len(ymls) > 0 {
			out = append(out, full)
		}
	}
	return out
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
		// An empty document ("---" at the end of a file, or between two
		// separators) holds no task, as it would in any YAML tool.
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue
		}
		p := parser{file: name, dir: filepath.Dir(name)}
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

// parser reads one YAML task file; dir is the directory paths in it
// (files: {path: ...}, build.context) are relative to.
type parser struct{ file, dir string }

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
	first := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := join(path, k.Value)
		if !ok[k.Value] {
			sorted := append([]string(nil), known...)
			sort.Strings(sorted)
			return p.errAt(k, field, "unknown field (known: %s)", strings.Join(sorted, ", "))
		}
		if err := p.once(first, k, field); err != nil {
			return err
		}
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

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// once refuses a mapping key seen before in the same mapping, naming the
// line of the first; first maps each key's text to its node.
func (p parser) once(first map[string]*yaml.Node, k *yaml.Node, field string) error {
	if prev, dup := first[k.Value]; dup {
		return p.errAt(k, field, "appears twice (first at line %d)", prev.Line)
	}
	first[k.Value] = k
	return nil
}

// yamlUnmarshalLineRE matches the "line N: " that yaml.v3 puts before each
// unmarshal error; errAt says the line already. A line inside the message
// ("already defined at line 3") is kept.
var yamlUnmarshalLineRE = regexp.MustCompile(`^line \d+: `)

func (p parser) decode(n *yaml.Node, field string, v any) error {
	if err := n.Decode(v); err != nil {
		msg := err.Error()
		msg = strings.TrimPrefix(msg, "yaml: unmarshal errors:\n  ")
		msg = strings.TrimPrefix(msg, "yaml: ")
		msg = yamlUnmarshalLineRE.ReplaceAllString(msg, "")
		return p.errAt(n, field, "%s", msg)
	}
	return nil
}

// errNotUTF8 is the message for a string that is not UTF-8. YAML itself is
// UTF-8; such bytes come from a !!binary tag.
const errNotUTF8 = "is not valid UTF-8 text: a dataset records its tasks as JSON, which keeps only UTF-8 exactly (make binary files in setup:, e.g. with base64 -d)"

func (p parser) str(n *yaml.Node, field string, dst *string) error {
	if n.Kind != yaml.ScalarNode {
		return p.errAt(n, field, "must be a string, not %s", kindName(n))
	}
	if err := p.decode(n, field, dst); err != nil {
		return err
	}
	if !utf8.ValidString(*dst) {
		return p.errAt(n, field, errNotUTF8)
	}
	return nil
}

// key returns the text of a mapping key that names something the task
// makes (a file, an environment variable).
func (p parser) key(k *yaml.Node, path string) (string, error) {
	switch {
	case k.Kind != yaml.ScalarNode:
		return "", p.errAt(k, path, "a name must be a plain string, not %s", kindName(k))
	case k.Tag == "!!null":
		return "", p.errAt(k, path, "a name must be a plain string, not null")
	case k.Tag == "!!binary":
		// Its text is base64: neither the name meant nor one to use.
		return "", p.errAt(k, path, "a name must be a plain string, not !!binary")
	}
	return k.Value, nil
}

// noNUL refuses a NUL byte in a string that reaches a process (a command,
// an environment entry, an image name) or names a path: execve and the
// file system end strings at NUL, so the replica would fail at run time.
func (p parser) noNUL(n *yaml.Node, field, s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return p.errAt(n, field, "holds a NUL byte (at byte %d); commands, names and paths cannot carry one", i)
	}
	return nil
}

// command checks a shell command of the task: the sandbox runs it as
// sh -c CMD, one execve argument.
func (p parser) command(n *yaml.Node, field, cmd string) error {
	if strings.TrimSpace(cmd) == "" {
		return p.errAt(n, field, "empty command")
	}
	if err := p.noNUL(n, field, cmd); err != nil {
		return err
	}
	if len(cmd) > MaxArgBytes {
		return p.errAt(n, field, "the command is %d bytes; one command may have at most %d (Linux's limit on one execve argument): put a long script in files: and run it", len(cmd), MaxArgBytes)
	}
	return nil
}

func (p parser) strList(n *yaml.Node, field string, dst *[]string) error {
	if n.Kind != yaml.SequenceNode {
		return p.errAt(n, field, "must be a list of commands, not %s", kindName(n))
	}
	for i, c := range n.Content {
		var s string
		item := fmt.Sprintf("%s[%d]", field, i)
		if err := p.str(c, item, &s); err != nil {
			return err
		}
		if err := p.command(c, item, s); err != nil {
			return err
		}
		*dst = append(*dst, s)
	}
	return nil
}

// durationRE is the syntax time.ParseDuration accepts. A string of that
// shape that still does not parse overflows int64 nanoseconds.
var durationRE = regexp.MustCompile(`^[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`)

// timeoutRange is the accepted range of durations, for messages.
var timeoutRange = fmt.Sprintf("from %s to %s", shortDuration(MinTimeout), shortDuration(MaxTimeout))

// shortDuration writes d without trailing zero units: 168h, not 168h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (p parser) duration(n *yaml.Node, field string, dst *Duration) error {
	var s string
	if err := p.str(n, field, &s); err != nil {
		return err
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && durationRE.MatchString(s):
		return p.errAt(n, field, "%q is out of range (%s)", s, timeoutRange)
	case err != nil:
		return p.errAt(n, field, "%q is not a positive duration such as 30s or 5m", s)
	case d <= 0:
		return p.errAt(n, field, "%q is not a positive duration such as 30s or 5m", s)
	case d < MinTimeout || d > MaxTimeout:
		return p.errAt(n, field, "%q is out of range (%s)", s, timeoutRange)
	}
	*dst = Duration(d)
	return nil
}

// timeoutMS checks a scripted action's duration in milliseconds (exec
// timeout_ms, wait ms); 0 is allowed where the action gives it a meaning.
func (p parser) timeoutMS(n *yaml.Node, field string, ms int64) error {
	if ms > MaxTimeout.Milliseconds() {
		return p.errAt(n, field, "%d ms is out of range (at most %d, %s)", ms, MaxTimeout.Milliseconds(), shortDuration(MaxTimeout))
	}
	return nil
}

// intRange checks an integer limit; unit names what it counts.
func (p parser) intRange(n *yaml.Node, field string, v, lo, hi int64, unit string) error {
	if v < lo || v > hi {
		return p.errAt(n, field, "%d is out of range (%d to %d %s)", v, lo, hi, unit)
	}
	return nil
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

var specFields = []string{"id", "instruction", "image", "build", "files", "env", "network", "setup", "start", "branch_start", "verify", "limits", "solution", "browser", "actions", "shell", "metadata"}

func (p parser) spec(n *yaml.Node) (Spec, error) {
	s := Spec{Source: fmt.Sprintf("%s:%d", p.file, n.Line)}
	var actions []actionNodes // to place errors found after the whole spec is read
	var imageNode *yaml.Node  // build:, for the image-or-build check
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
			if err := p.str(v, key, &s.Image); err != nil {
				return err
			}
			if s.Image == "" {
				// An empty image would silently mean the provider's default.
				return p.errAt(v, key, "is empty (leave image out for the provider's default)")
			}
			return p.noNUL(v, key, s.Image)
		case "build":
			imageNode = v
			return p.build(v, &s)
		case "files":
			return p.files(v, &s)
		case "env":
			return p.env(v, &s)
		case "network":
			return p.network(v, &s)
		case "metadata":
			return p.metadata(v, &s)
		case "setup":
			return p.strList(v, key, &s.Setup)
		case "start":
			return p.strList(v, key, &s.Start)
		case "branch_start":
			return p.strList(v, key, &s.BranchStart)
		case "verify":
			return p.verify(v, &s)
		case "limits":
			return p.limits(v, &s.Limits)
		case "solution":
			var err error
			actions, err = p.solution(v, &s)
			return err
		case "browser":
			return p.browser(v, &s)
		case "actions":
			return p.actions(v, &s)
		case "shell":
			if err := p.str(v, key, &s.Shell); err != nil {
				return err
			}
			switch s.Shell {
			case "fresh":
				s.Shell = "" // the default, spelled out: the same task, the same hash
			case "persistent":
			default:
				return p.errAt(v, key, "unknown shell mode %q (known: fresh, persistent)", s.Shell)
			}
			return nil
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
	if s.Build != nil && s.Image != "" {
		return Spec{}, p.errAt(imageNode, "build", "a task gives image or build, not both (build makes the image)")
	}
	// The browser section may come after the solution, so clicks are
	// checked against the viewport once both are read.
	if err := p.clicks(&s, actions); err != nil {
		return Spec{}, err
	}
	if err := p.allowed(&s, n); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// listable are the actions a task's actions list may name.
var listable = append(append([]runtime.ActionKind(nil), ShellActions...), TerminalActions...)

// actions reads the task's actions: the shell actions it allows (a list of
// exec, read_file, write_file, send_keys, read_screen, each once). GUI actions come with the
// browser section and done with every task, so neither is listed.
func (p parser) actions(v *yaml.Node, s *Spec) error {
	if v.Kind != yaml.SequenceNode {
		return p.errAt(v, "actions", "must be a list of shell actions (%s), not %s", kindList(listable), kindName(v))
	}
	s.Actions = []runtime.ActionKind{}
	for i, c := range v.Content {
		field := fmt.Sprintf("actions[%d]", i)
		var name string
		if err := p.str(c, field, &name); err != nil {
			return err
		}
		k := runtime.ActionKind(name)
		switch {
		case k == runtime.ActDone:
			return p.errAt(c, field, "done is allowed in every task; leave it out")
		case slices.Contains(GUIActions, k):
			return p.errAt(c, field, "%s is a GUI action: GUI actions come with the browser section, not this list", k)
		case !slices.Contains(listable, k):
			return p.errAt(c, field, "%q is not a shell action (known: %s)", name, kindList(listable))
		case slices.Contains(s.Actions, k):
			return p.errAt(c, field, "%s is listed twice", k)
		}
		s.Actions = append(s.Actions, k)
	}
	return nil
}

// allowed checks the actions list once the whole spec is read (the
// browser section may come after it). A scripted solution is not held to
// it: the list says which tools a model is offered, and a script replays
// what its author wrote (a click in a shell task is an observation of an
// unsupported action, which tests of that rely on).
func (p parser) allowed(s *Spec, n *yaml.Node) error {
	if s.Browser == nil && s.Actions != nil && len(s.Actions) == 0 {
		return p.errAt(n, "actions", "is empty, and a task without a browser has no other actions (leave actions out for every shell action)")
	}
	return nil
}

func kindList(ks []runtime.ActionKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// files reads the files section. A name is a slash-separated path relative
// to the workspace whose every segment names a file or directory: no
// absolute paths, no empty, "." or ".." segments (a..b.txt is a fine name),
// no backslashes (a task written on Windows would otherwise get one file
// literally named dir\file.txt), at most MaxNameBytes per segment. So every
// accepted name is the one path it makes, and two names never make the same
// file; a name that is a file cannot also be a directory of another.
func (p parser) files(v *yaml.Node, s *Spec) error {
	fs, err := p.fileSet(v, "files")
	if err != nil {
		return err
	}
	s.Files, s.BinaryFiles = fs.text, fs.binary
	return nil
}

// fileSet is what a files section holds: text contents, binary contents
// (read from paths), and the names whose source file is executable.
type fileSet struct {
	text       map[string]string
	binary     map[string][]byte
	executable []string
}

// fileSet reads a section of files (files:, verify.files): name: content,
// or name: {path: FILE} with FILE relative to the task file, read now (any
// bytes; text when it is UTF-8). A name is a slash-separated path relative
// to the directory the files go to, whose every segment names a file or
// directory: no absolute paths, no empty, "." or ".." segments (a..b.txt
// is a fine name), no backslashes (a task written on Windows would
// otherwise get one file literally named dir\file.txt), at most
// MaxNameBytes per segment. So every accepted name is the one path it
// makes, and two names never make the same file; a name that is a file
// cannot also be a directory of another.
func (p parser) fileSet(v *yaml.Node, section string) (fileSet, error) {
	if v.Kind != yaml.MappingNode {
		return fileSet{}, p.errAt(v, section, "must be a mapping of path: content, not %s", kindName(v))
	}
	type origin struct {
		name string
		line int
	}
	out := fileSet{text: map[string]string{}}
	total := 0
	first := map[string]*yaml.Node{}
	dirs := map[string]origin{} // directory → the first file name that makes it
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, c := v.Content[i], v.Content[i+1]
		name, err := p.key(k, section)
		if err != nil {
			return fileSet{}, err
		}
		field := section + "." + name
		if name == "" {
			field = section
		}
		if err := p.once(first, k, field); err != nil {
			return fileSet{}, err
		}
		if !utf8.ValidString(name) {
			return fileSet{}, p.errAt(k, field, errNotUTF8)
		}
		if err := p.noNUL(k, field, name); err != nil {
			return fileSet{}, err
		}
		if msg := checkFileName(name); msg != "" {
			return fileSet{}, p.errAt(k, field, "%s", msg)
		}
		if d, ok := dirs[name]; ok {
			return fileSet{}, p.errAt(k, field, "is a directory already (%s.%s, line %d), so it cannot be a file too", section, d.name, d.line)
		}
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if f, ok := first[dir]; ok {
				return fileSet{}, p.errAt(k, field, "needs %s to be a directory, but %s.%s (line %d) makes it a file", dir, section, dir, f.Line)
			}
			if _, ok := dirs[dir]; !ok {
				dirs[dir] = origin{name, k.Line}
			}
		}
		if c.Kind == yaml.MappingNode {
			data, exe, err := p.fileRef(c, field)
			if err != nil {
				return fileSet{}, err
			}
			if total += len(data); total > MaxFilesBytes {
				return fileSet{}, p.errAt(c, field, "the files of %s add up to more than %d bytes; build them into the image instead (build:)", section, MaxFilesBytes)
			}
			if utf8.Valid(data) {
				out.text[name] = string(data)
			} else {
				if out.binary == nil {
					out.binary = map[string][]byte{}
				}
				out.binary[name] = data
			}
			if exe {
				out.executable = append(out.executable, name)
			}
			continue
		}
		var content string
		if err := p.str(c, field, &content); err != nil {
			return fileSet{}, err
		}
		total += len(content)
		out.text[name] = content
	}
	sort.Strings(out.executable)
	return out, nil
}

// fileRef reads {path: FILE}: FILE relative to the task file's directory
// and inside it, a regular file of at most MaxFileBytes; a symlink is
// followed only while it stays inside that directory (see confined).
// exe reports that it is executable by its owner.
func (p parser) fileRef(n *yaml.Node, field string) (data []byte, exe bool, err error) {
	var rel string
	var at *yaml.Node
	err = p.fields(n, field, []string{"path"}, func(_ string, v *yaml.Node) error {
		at = v
		return p.str(v, field+".path", &rel)
	})
	if err != nil {
		return nil, false, err
	}
	if at == nil {
		return nil, false, p.errAt(n, field+".path", "missing: {path: FILE} names a file relative to %s", p.file)
	}
	if err := p.noNUL(at, field+".path", rel); err != nil {
		return nil, false, err
	}
	if rel == "" || filepath.IsAbs(rel) {
		return nil, false, p.errAt(at, field+".path", "%q must be a path relative to the task file's directory", rel)
	}
	if !filepath.IsLocal(filepath.FromSlash(rel)) {
		return nil, false, p.errAt(at, field+".path", "%q leaves the task file's directory: a task reads its files only from inside it", rel)
	}
	full := filepath.Join(p.dir, filepath.FromSlash(rel))
	c, err := openConfined(p.dir, p.dir)
	if err != nil {
		return nil, false, p.errAt(at, field+".path", "%v", err)
	}
	defer c.Close()
	data, st, err := c.readFile(rel, MaxFileBytes)
	switch {
	case errors.Is(err, errNotRegular) && st.IsDir():
		return nil, false, p.errAt(at, field+".path", "%s is a directory; name each of its files", full)
	case errors.Is(err, errNotRegular):
		return nil, false, p.errAt(at, field+".path", "%s is not a regular file", full)
	case errors.Is(err, errTooLarge):
		return nil, false, p.errAt(at, field+".path", "%s is %d bytes; at most %d (a dataset records its tasks): build large files into the image (build:)", full, st.Size(), MaxFileBytes)
	case err != nil:
		return nil, false, p.errAt(at, field+".path", "%s", c.explain(rel, err))
	}
	return data, st.Mode()&0o100 != 0, nil
}

// checkFileName says what is wrong with a name of the files section, or ""
// (see files).
func checkFileName(name string) string {
	switch {
	case name == "":
		return "the path is empty"
	case strings.HasPrefix(name, "/"):
		return "the path must be relative to the workspace"
	case strings.ContainsRune(name, '\\'):
		return `the path holds a backslash; separate directories with "/"`
	}
	for _, seg := range strings.Split(name, "/") {
		switch {
		case seg == "":
			return `the path has an empty segment (a doubled or trailing "/")`
		case seg == ".":
			return `the path has a "." segment; write it without`
		case seg == "..":
			return `the path has a ".." segment: files must stay inside the workspace`
		case len(seg) > MaxNameBytes:
			return fmt.Sprintf("a segment of the path is %d bytes; at most %d", len(seg), MaxNameBytes)
		}
	}
	return ""
}

// env reads the env section: NAME: value pairs, each a string. A name is
// any non-empty text without "=" (which ends a name in NAME=value) or NUL;
// names a shell cannot expand ($A.B) are still passed to the processes.
func (p parser) env(v *yaml.Node, s *Spec) error {
	if v.Kind != yaml.MappingNode {
		return p.errAt(v, "env", "must be a mapping of NAME: value, not %s", kindName(v))
	}
	s.Env = map[string]string{}
	first := map[string]*yaml.Node{}
	total := 0
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		name, err := p.key(k, "env")
		if err != nil {
			return err
		}
		field := "env." + name
		if name == "" {
			field = "env"
		}
		if err := p.once(first, k, field); err != nil {
			return err
		}
		switch {
		case !utf8.ValidString(name):
			return p.errAt(k, field, errNotUTF8)
		case name == "":
			return p.errAt(k, field, "the variable name is empty")
		case strings.ContainsRune(name, '='):
			return p.errAt(k, field, `the variable name holds "=", which would end it`)
		}
		if err := p.noNUL(k, field, name); err != nil {
			return err
		}
		var value string
		if err := p.str(val, field, &value); err != nil {
			return err
		}
		if err := p.noNUL(val, field, value); err != nil {
			return err
		}
		if n := len(name) + 1 + len(value); n > MaxArgBytes {
			return p.errAt(val, field, "NAME=value is %d bytes; at most %d (Linux's limit on one environment string)", n, MaxArgBytes)
		}
		total += len(name) + 1 + len(value) + 1
		s.Env[name] = value
	}
	if total > MaxEnvBytes {
		return p.errAt(v, "env", "the environment is %d bytes; at most %d, so that a command still fits beside it", total, MaxEnvBytes)
	}
	return nil
}

func (p parser) verify(v *yaml.Node, s *Spec) error {
	ver := &Verify{}
	cmdNode := v
	// A bare string is the command with the default reward rule.
	if v.Kind == yaml.ScalarNode {
		if err := p.str(v, "verify", &ver.Cmd); err != nil {
			return err
		}
	} else {
		err := p.fields(v, "verify", []string{"cmd", "reward", "timeout", "files"}, func(key string, n *yaml.Node) error {
			switch key {
			case "cmd":
				cmdNode = n
				return p.str(n, "verify.cmd", &ver.Cmd)
			case "reward":
				if err := p.str(n, "verify.reward", &ver.Reward); err != nil {
					return err
				}
				if ver.Reward != RewardExit && ver.Reward != RewardNumber {
					return p.errAt(n, "verify.reward", "%q is not a reward rule (known: exit, number)", ver.Reward)
				}
			case "files":
				fs, err := p.fileSet(n, "verify.files")
				if err != nil {
					return err
				}
				ver.Files, ver.BinaryFiles, ver.Executable = fs.text, fs.binary, fs.executable
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
	if err := p.command(cmdNode, "verify.cmd", ver.Cmd); err != nil {
		return err
	}
	s.Verify = ver
	return nil
}

func (p parser) limits(v *yaml.Node, l *Limits) error {
	known := []string{"max_steps", "action_timeout", "episode_timeout", "output_cap", "cpus", "memory_mb", "pids", "capabilities"}
	return p.fields(v, "limits", known, func(key string, n *yaml.Node) error {
		field := "limits." + key
		switch key {
		case "max_steps":
			if err := p.decode(n, field, &l.MaxSteps); err != nil {
				return err
			}
			return p.intRange(n, field, int64(l.MaxSteps), 1, MaxStepsLimit, "steps")
		case "action_timeout":
			return p.duration(n, field, &l.ActionTimeout)
		case "episode_timeout":
			return p.duration(n, field, &l.EpisodeTimeout)
		case "output_cap":
			if err := p.decode(n, field, &l.OutputCap); err != nil {
				return err
			}
			return p.intRange(n, field, int64(l.OutputCap), 1, MaxOutputCap, "bytes")
		case "cpus":
			if err := p.decode(n, field, &l.CPUs); err != nil {
				return err
			}
			// NaN fails every comparison, so it is named first.
			if math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) {
				return p.errAt(n, field, "%s is not a finite number of cores", n.Value)
			}
			if l.CPUs < MinCPUs || l.CPUs > MaxCPUs {
				return p.errAt(n, field, "%s is out of range (%g to %d cores)", n.Value, MinCPUs, MaxCPUs)
			}
		case "memory_mb":
			if err := p.decode(n, field, &l.MemoryMB); err != nil {
				return err
			}
			return p.intRange(n, field, l.MemoryMB, MinMemoryMB, MaxMemoryMB, "MB")
		case "pids":
			if err := p.decode(n, field, &l.Pids); err != nil {
				return err
			}
			return p.intRange(n, field, l.Pids, 1, MaxPids, "processes")
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
// ({kind: exec, cmd: ...}), and reports the line of a bad one. It returns
// each action's field nodes, for checks that need the rest of the spec.
func (p parser) solution(v *yaml.Node, s *Spec) ([]actionNodes, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, p.errAt(v, "solution", "must be a list of actions, not %s", kindName(v))
	}
	var nodes []actionNodes
	for i, item := range v.Content {
		field := fmt.Sprintf("solution[%d]", i)
		if item.Kind != yaml.MappingNode {
			return nil, p.errAt(item, field, "must be an action such as {kind: exec, cmd: ls}, not %s", kindName(item))
		}
		an := actionNodes{item: item, fields: map[string]*yaml.Node{}}
		first := map[string]*yaml.Node{}
		for j := 0; j+1 < len(item.Content); j += 2 {
			k := item.Content[j]
			if err := p.once(first, k, field+"."+k.Value); err != nil {
				return nil, err
			}
			an.fields[k.Value] = item.Content[j+1]
		}
		var m map[string]any
		if err := p.decode(item, field, &m); err != nil {
			return nil, err
		}
		// json.Marshal would silently replace bytes that are not UTF-8.
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if str, ok := m[k].(string); ok && !utf8.ValidString(str) {
				return nil, p.errAt(an.at(k), field+"."+k, errNotUTF8)
			}
		}
		raw, err := json.Marshal(m)
		if err != nil {
			return nil, p.errAt(item, field, "%v", err)
		}
		var a runtime.Action
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, p.errAt(item, field, "%s", strings.TrimPrefix(err.Error(), "runtime: "))
		}
		if err := p.action(a, field, an); err != nil {
			return nil, err
		}
		s.Solution = append(s.Solution, a)
		nodes = append(nodes, an)
	}
	return nodes, nil
}

// actionNodes are the YAML nodes of one scripted action.
type actionNodes struct {
	item   *yaml.Node
	fields map[string]*yaml.Node // by field name, as written
}

// at returns the node of a field, or the action's own node when the field
// is not written out (it came from a merge key).
func (an actionNodes) at(name string) *yaml.Node {
	if n, ok := an.fields[name]; ok {
		return n
	}
	return an.item
}

// action checks what runtime.Action.Validate leaves to the one who writes
// the action: a scripted action is a mistake in the file when it could
// never run as written. Text that only becomes data (write_file content, a
// done answer) may hold any character.
func (p parser) action(a runtime.Action, field string, an actionNodes) error {
	at := func(name string) (*yaml.Node, string) { return an.at(name), field + "." + name }
	noNUL := func(name, s string) error {
		n, f := at(name)
		return p.noNUL(n, f, s)
	}
	switch a.Kind {
	case runtime.ActExec:
		n, f := at("cmd")
		if err := p.command(n, f, a.Cmd); err != nil {
			return err
		}
		n, f = at("timeout_ms")
		return p.timeoutMS(n, f, a.TimeoutMS)
	case runtime.ActReadFile, runtime.ActWriteFile:
		return noNUL("path", a.Path)
	case runtime.ActWait:
		n, f := at("ms")
		return p.timeoutMS(n, f, a.MS)
	case runtime.ActType:
		return noNUL("text", a.Text)
	case runtime.ActKey:
		return noNUL("keys", a.Keys)
	case runtime.ActNavigate:
		return noNUL("url", a.URL)
	case runtime.ActClick:
		for _, c := range []struct {
			name string
			v    int
		}{{"x", a.X}, {"y", a.Y}} {
			if c.v < 0 {
				n, f := at(c.name)
				return p.errAt(n, f, "%d is negative; clicks are at viewport pixels from the top left", c.v)
			}
		}
	}
	return nil
}

// clicks checks the solution's clicks against the task's viewport: a
// scripted click outside it can only fail.
func (p parser) clicks(s *Spec, nodes []actionNodes) error {
	if s.Browser == nil {
		return nil
	}
	b := s.WithDefaults().Browser
	for i, a := range s.Solution {
		if a.Kind != runtime.ActClick || (a.X < b.Width && a.Y < b.Height) {
			continue
		}
		name := "x"
		if a.X < b.Width {
			name = "y"
		}
		return p.errAt(nodes[i].at(name), fmt.Sprintf("solution[%d].%s", i, name), "click (%d, %d) is outside the %dx%d viewport", a.X, a.Y, b.Width, b.Height)
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
			if err := p.noNUL(n, field, b.Start); err != nil {
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

// build reads build: {context, dockerfile, args, target, timeout}: the
// context is a directory relative to the task file; the Dockerfile a path
// inside it. The context is digested now, so that its content is part of
// the spec's hash.
func (p parser) build(v *yaml.Node, s *Spec) error {
	b := &Build{}
	var ctxNode, dfNode *yaml.Node
	known := []string{"context", "dockerfile", "args", "target", "timeout"}
	err := p.fields(v, "build", known, func(key string, n *yaml.Node) error {
		field := "build." + key
		switch key {
		case "context":
			ctxNode = n
			return p.str(n, field, &b.Context)
		case "dockerfile":
			dfNode = n
			return p.str(n, field, &b.Dockerfile)
		case "target":
			if err := p.str(n, field, &b.Target); err != nil {
				return err
			}
			return p.noNUL(n, field, b.Target)
		case "timeout":
			return p.duration(n, field, &b.Timeout)
		case "args":
			if n.Kind != yaml.MappingNode {
				return p.errAt(n, field, "must be a mapping of NAME: value, not %s", kindName(n))
			}
			b.Args = map[string]string{}
			first := map[string]*yaml.Node{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, val := n.Content[i], n.Content[i+1]
				name, err := p.key(k, field)
				if err != nil {
					return err
				}
				if err := p.once(first, k, field+"."+name); err != nil {
					return err
				}
				if !argNameRE.MatchString(name) {
					return p.errAt(k, field+"."+name, "%q is not a build argument name (letters, digits, _; not starting with a digit)", name)
				}
				var value string
				if err := p.str(val, field+"."+name, &value); err != nil {
					return err
				}
				if err := p.noNUL(val, field+"."+name, value); err != nil {
					return err
				}
				b.Args[name] = value
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if ctxNode == nil {
		return p.errAt(v, "build.context", "missing: the directory the image is built from, relative to %s", p.file)
	}
	if err := p.resolveBuild(b, ctxNode, dfNode); err != nil {
		return err
	}
	s.Build = b
	return nil
}

var argNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// resolveBuild makes b.Context absolute, checks that the Dockerfile is a
// file inside it and digests the context. dfNode may be nil.
func (p parser) resolveBuild(b *Build, ctxNode, dfNode *yaml.Node) error {
	if err := p.noNUL(ctxNode, "build.context", b.Context); err != nil {
		return err
	}
	// The context is sent to the engine whole: it is a directory of the
	// task's own, inside the task file's directory (a task from a third
	// party cannot send the host's /etc to a build).
	rel := filepath.FromSlash(b.Context)
	if !filepath.IsLocal(rel) && rel != "." {
		return p.errAt(ctxNode, "build.context", "%q leaves the task file's directory: the build context is a directory inside it", b.Context)
	}
	c, err := openConfined(p.dir, p.dir)
	if err != nil {
		return p.errAt(ctxNode, "build.context", "%v", err)
	}
	defer c.Close()
	abs, err := filepath.Abs(filepath.Join(p.dir, rel))
	if err != nil {
		return p.errAt(ctxNode, "build.context", "%v", err)
	}
	if st, err := c.stat(filepath.ToSlash(rel)); err != nil || !st.IsDir() {
		if _, out := c.escapes(filepath.ToSlash(rel)); out {
			return p.errAt(ctxNode, "build.context", "%s", c.explain(filepath.ToSlash(rel), err))
		}
		return p.errAt(ctxNode, "build.context", "%s is not a directory", abs)
	}
	if st, err := os.Lstat(abs); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real // the directory itself, not a link to it: the build walks it
		}
	}
	b.Context = abs
	at, field := ctxNode, "build.context"
	if dfNode != nil {
		at, field = dfNode, "build.dockerfile"
	}
	if msg := checkDockerfile(abs, b.Dockerfile); msg != "" {
		return p.errAt(at, field, "%s", msg)
	}
	if b.Dockerfile == DefaultDockerfile {
		b.Dockerfile = "" // one spelling, one hash
	}
	if b.ContextDigest, err = DigestTree(abs); err != nil {
		return p.errAt(ctxNode, "build.context", "%s", strings.TrimPrefix(err.Error(), "task: "))
	}
	return nil
}

// checkDockerfile says what is wrong with a build's Dockerfile, or "".
func checkDockerfile(context, dockerfile string) string {
	name := dockerfile
	if name == "" {
		name = DefaultDockerfile
	}
	if msg := checkFileName(name); msg != "" {
		return fmt.Sprintf("the Dockerfile %q: %s (it is a path inside the build context)", name, msg)
	}
	full := filepath.Join(context, filepath.FromSlash(name))
	c, err := openConfined(context, context)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	st, err := c.stat(name)
	if err != nil || !st.Mode().IsRegular() {
		if _, out := c.escapes(name); out {
			// The engine resolves the context's links inside it; a
			// Dockerfile that points out of it is refused here, by name.
			return c.explain(name, err) + " (the Dockerfile is a path inside the build context)"
		}
		return fmt.Sprintf("%s is not a file (the Dockerfile is a path inside the build context)", full)
	}
	if _, err := c.lstat(".dockerignore"); err == nil {
		// The engine's legacy builder takes the context as sent; it is the
		// client that applies .dockerignore, and forkline does not yet.
		return fmt.Sprintf("%s has a .dockerignore, which forkline does not apply: the whole context would reach the build; remove it (or move the files it excludes out of the context)", context)
	}
	return ""
}

var networkRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*(?::[A-Za-z0-9][A-Za-z0-9_.-]*)?$`)

// network reads network: MODE (the episodes' and the setup's) or
// network: {episode: MODE, setup: MODE}. A mode is a provider's network
// mode name (none, host, bridge, a network's name on docker); the
// provider refuses one it does not have before anything runs.
func (p parser) network(v *yaml.Node, s *Spec) error {
	n := &Network{}
	check := func(node *yaml.Node, field string, dst *string) error {
		if err := p.str(node, field, dst); err != nil {
			return err
		}
		if !networkRE.MatchString(*dst) {
			return p.errAt(node, field, "%q is not a network mode name (none, host, bridge, or a network's name)", *dst)
		}
		return nil
	}
	if v.Kind == yaml.ScalarNode {
		if err := check(v, "network", &n.Episode); err != nil {
			return err
		}
		s.Network = n
		return nil
	}
	err := p.fields(v, "network", []string{"episode", "setup"}, func(key string, node *yaml.Node) error {
		if key == "episode" {
			return check(node, "network.episode", &n.Episode)
		}
		return check(node, "network.setup", &n.Setup)
	})
	if err != nil {
		return err
	}
	if n.Episode == "" {
		n.Episode = NetworkNone
	}
	if n.Setup == n.Episode {
		n.Setup = "" // one spelling, one hash
	}
	s.Network = n
	return nil
}

// metadata reads the free-form metadata: a mapping with string keys, kept
// as canonical JSON (keys sorted), so it hashes stably and reads back from
// a manifest unchanged.
func (p parser) metadata(v *yaml.Node, s *Spec) error {
	if v.Kind != yaml.MappingNode {
		return p.errAt(v, "metadata", "must be a mapping, not %s", kindName(v))
	}
	var m any
	if err := p.decode(v, "metadata", &m); err != nil {
		return err
	}
	raw, err := CanonicalMetadata(m)
	if err != nil {
		return p.errAt(v, "metadata", "%s", strings.TrimPrefix(err.Error(), "task: "))
	}
	s.Metadata = raw
	return nil
}

// CanonicalMetadata is m as compact JSON with sorted keys: an object,
// every key a string, every number finite. A dataset keeps it verbatim.
func CanonicalMetadata(m any) (json.RawMessage, error) {
	if _, ok := m.(map[string]any); !ok {
		return nil, fmt.Errorf("task: metadata must be a mapping with string keys")
	}
	if err := checkMetadataValue(m, "metadata"); err != nil {
		return nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("task: metadata: %w", err)
	}
	return b, nil
}

func checkMetadataValue(v any, at string) error {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if err := checkMetadataValue(x[k], at+"."+k); err != nil {
				return err
			}
		}
	case map[any]any:
		return fmt.Errorf("task: %s: keys must be strings", at)
	case []any:
		for i, e := range x {
			if err := checkMetadataValue(e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("task: %s: %v has no JSON form", at, x)
		}
	case string:
		if !utf8.ValidString(x) {
			return fmt.Errorf("task: %s: %s", at, errNotUTF8)
		}
	}
	return nil
}
