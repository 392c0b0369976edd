package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"os"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/forkline/forkline/runtime"
)

// FuzzParse feeds arbitrary bytes to Parse. Its seeds are the example tasks
// (testdata/fuzz/FuzzParse) and the cases below. Whatever the input:
//
//   - Parse does not panic, and a refusal is a SpecError naming the file;
//   - an accepted spec keeps every rule the parser promises (checkAccepted),
//     so nothing it accepts breaks a replica later;
//   - it hashes without panicking, the same every time, and defaults do not
//     change its hash;
//   - its manifest record (EncodeRecords → DecodeRecords, what replay and
//     export read) is the same spec, with the same hash;
//   - written back as task YAML, it parses to the same spec.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		good,
		head + "limits: {cpus: .inf, memory_mb: 512, pids: 64, output_cap: 1024, max_steps: 3}\n",
		head + "limits: {action_timeout: 2562047h, episode_timeout: 1ms}\nverify: {cmd: 'true', timeout: 999us}\n",
		head + "env: {A: \"x\\0y\", 'B=C': d, LANG: C.UTF-8}\nimage: \"busybox\\0\"\n",
		head + "files:\n  a.txt: one\n  a.txt: two\n  d/a..b.txt: three\n  d/e: four\n",
		head + "files: {a: x, a/b: y, ./c: z, 'd\\e': w, e/../f: v}\n",
		head + "browser: {viewport: 800x600, start: index.html, load_timeout: 3s}\nsolution: [{kind: click, x: 799, y: 600}]\n",
		head + "solution:\n  - {kind: exec, cmd: ls, timeout_ms: 5000}\n  - {<<: {kind: wait, ms: 10}}\n  - {kind: done, answer: \"\\0\"}\n",
		head + "---\n" + head + "---\n",
		head + "files: {a: !!binary /w==}\ninstruction: &x y\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		specs, err := Parse("fuzz.yaml", data)
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) || !errors.Is(err, ErrSpec) {
				t.Fatalf("refusal %v (%T) is not a SpecError", err, err)
			}
			if se.File != "fuzz.yaml" || !strings.HasPrefix(err.Error(), "task: fuzz.yaml") {
				t.Fatalf("refusal %q does not name the file", err)
			}
			return
		}
		if len(specs) == 0 {
			t.Fatal("accepted a file with no spec")
		}
		for _, s := range specs {
			checkAccepted(t, s)
			h := s.Hash()
			if len(h) != 64 || h != s.Hash() || h != s.WithDefaults().Hash() {
				t.Fatalf("spec %s: hash %q is not one stable sha256 with defaults applied", s.ID, h)
			}
		}

		raw, err := EncodeRecords(specs)
		if err != nil {
			t.Fatalf("an accepted spec does not encode: %v", err)
		}
		recs, err := decodeRecords(raw)
		if err != nil {
			t.Fatalf("records do not decode: %v", err)
		}
		for i, r := range recs {
			want := normalize(specs[i].WithDefaults())
			if got := normalize(r.Spec.WithDefaults()); !equalJSONAndValue(got, want) {
				t.Fatalf("spec %d changes in its manifest record:\nparsed   %#v\nrecorded %#v", i, want, got)
			}
			if r.Hash != specs[i].Hash() || r.Spec.Hash() != r.Hash {
				t.Fatalf("spec %d: record hash %s, parsed %s, re-hashed %s", i, r.Hash, specs[i].Hash(), r.Spec.Hash())
			}
		}
		if _, err := DecodeRecords(raw); err != nil && !duplicateIDs(specs) {
			t.Fatalf("DecodeRecords refuses what EncodeRecords wrote: %v", err)
		}

		again, err := Parse("again.yaml", renderYAML(t, specs))
		if err != nil {
			t.Fatalf("the accepted spec, written back as YAML, is refused: %v\n%s", err, renderYAML(t, specs))
		}
		if len(again) != len(specs) {
			t.Fatalf("written back: %d specs, parsed %d", len(again), len(specs))
		}
		for i := range specs {
			if want, got := normalize(specs[i]), normalize(again[i]); !equalJSONAndValue(got, want) {
				t.Fatalf("spec %d differs once written back:\nfirst  %#v\nsecond %#v", i, want, got)
			}
		}
	})
}

func duplicateIDs(specs []Spec) bool {
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.ID] {
			return true
		}
		seen[s.ID] = true
	}
	return false
}

// checkAccepted fails t unless s keeps the rules Parse promises. It is
// written apart from the parser, from the rules as documented.
func checkAccepted(t *testing.T, s Spec) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("accepted spec %q: "+format, append([]any{s.ID}, args...)...)
	}
	if !idRE.MatchString(s.ID) || strings.TrimSpace(s.Instruction) == "" {
		fail("id or instruction missing")
	}
	var texts []string // every string of the spec, which must be UTF-8
	texts = append(texts, s.ID, s.Instruction, s.Image)
	commands := append(append([]string(nil), s.Setup...), s.Start...)
	if s.Verify != nil {
		commands = append(commands, s.Verify.Cmd)
		if r := s.Verify.Reward; r != "" && r != "exit" && r != "number" {
			fail("verify reward %q", r)
		}
		if s.Verify.TimeoutMS < 0 || s.Verify.TimeoutMS > MaxTimeout.Milliseconds() {
			fail("verify timeout %d ms", s.Verify.TimeoutMS)
		}
	}
	for _, a := range s.Solution {
		if err := a.Validate(); err != nil {
			fail("action %v: %v", a, err)
		}
		if a.Kind == runtime.ActExec {
			commands = append(commands, a.Cmd)
		}
		for _, str := range []string{a.Path, a.URL, a.Keys, a.Text, a.Button} {
			if strings.ContainsRune(str, 0) {
				fail("action %v holds a NUL", a)
			}
		}
		texts = append(texts, a.Path, a.Content, a.URL, a.Keys, a.Text, a.Answer)
		if a.TimeoutMS > MaxTimeout.Milliseconds() || a.MS > MaxTimeout.Milliseconds() || a.X < 0 || a.Y < 0 {
			fail("action %v out of range", a)
		}
	}
	if strings.ContainsRune(s.Image, 0) {
		fail("image holds a NUL")
	}
	for _, c := range commands {
		if strings.TrimSpace(c) == "" || strings.ContainsRune(c, 0) || len(c) > MaxArgBytes {
			fail("command %.40q", c)
		}
	}
	texts = append(texts, commands...)
	envBytes := 0
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) || len(k)+1+len(v) > MaxArgBytes {
			fail("env %.40q=%.40q", k, v)
		}
		envBytes += len(k) + len(v) + 2
		texts = append(texts, k, v)
	}
	if envBytes > MaxEnvBytes {
		fail("env of %d bytes", envBytes)
	}
	for name, content := range s.Files {
		if path.Clean(name) != name || path.IsAbs(name) || name == "." || strings.HasPrefix(name, "../") || name == ".." ||
			strings.ContainsAny(name, "\\\x00") {
			fail("file name %q is not one canonical workspace path", name)
		}
		for _, seg := range strings.Split(name, "/") {
			if seg == ".." || len(seg) > MaxNameBytes {
				fail("file name %q", name)
			}
		}
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if _, ok := s.Files[dir]; ok {
				fail("file %q is also the directory of %q", dir, name)
			}
		}
		texts = append(texts, name, content)
	}
	l := s.Limits
	inRange := func(v, lo, hi float64) bool { return v == 0 || (v >= lo && v <= hi) }
	if !inRange(float64(l.MaxSteps), 1, MaxStepsLimit) || !inRange(float64(l.OutputCap), 1, MaxOutputCap) ||
		math.IsNaN(l.CPUs) || !inRange(l.CPUs, MinCPUs, MaxCPUs) || !inRange(float64(l.MemoryMB), MinMemoryMB, MaxMemoryMB) ||
		!inRange(float64(l.Pids), 1, MaxPids) {
		fail("limits %+v out of range", l)
	}
	durations := []Duration{l.ActionTimeout, l.EpisodeTimeout}
	if b := s.Browser; b != nil {
		durations = append(durations, b.LoadTimeout)
		if b.Width != 0 && (b.Width < minViewport || b.Width > maxViewport || b.Height < minViewport || b.Height > maxViewport) {
			fail("viewport %dx%d", b.Width, b.Height)
		}
		if msg := checkStartPage(b.Start); b.Start != "" && msg != "" {
			fail("start page %q %s", b.Start, msg)
		}
		texts = append(texts, b.Start, b.Observe)
		wb := s.WithDefaults().Browser
		for _, a := range s.Solution {
			if a.Kind == runtime.ActClick && (a.X >= wb.Width || a.Y >= wb.Height) {
				fail("click %v outside %dx%d", a, wb.Width, wb.Height)
			}
		}
	}
	for _, d := range durations {
		if d != 0 && (time.Duration(d) < MinTimeout || time.Duration(d) > MaxTimeout) {
			fail("duration %v out of range", time.Duration(d))
		}
	}
	for _, str := range texts {
		if !utf8.ValidString(str) {
			fail("%.40q is not UTF-8", str)
		}
	}
}

// normalize drops what is not part of a spec's meaning: where it was read
// from, and the difference between an empty and an absent collection.
func normalize(s Spec) Spec {
	s.Source = ""
	if len(s.Files) == 0 {
		s.Files = nil
	}
	if len(s.Env) == 0 {
		s.Env = nil
	}
	if len(s.Setup) == 0 {
		s.Setup = nil
	}
	if len(s.Start) == 0 {
		s.Start = nil
	}
	if len(s.Solution) == 0 {
		s.Solution = nil
	}
	return s
}

// equalJSONAndValue compares two specs by value (so a string json.Marshal
// would have coerced still differs) and by their canonical JSON.
func equalJSONAndValue(a, b Spec) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA != nil || errB != nil || !bytes.Equal(ja, jb) {
		return false
	}
	return specEqual(a, b)
}

func specEqual(a, b Spec) bool {
	eqMap := func(x, y map[string]string) bool {
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || w != v {
				return false
			}
		}
		return true
	}
	eqList := func(x, y []string) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if a.ID != b.ID || a.Instruction != b.Instruction || a.Image != b.Image || !eqMap(a.Files, b.Files) ||
		!eqMap(a.Env, b.Env) || !eqList(a.Setup, b.Setup) || !eqList(a.Start, b.Start) || !sameLimits(a.Limits, b.Limits) ||
		len(a.Solution) != len(b.Solution) || (a.Verify == nil) != (b.Verify == nil) || (a.Browser == nil) != (b.Browser == nil) {
		return false
	}
	for i := range a.Solution {
		if a.Solution[i] != b.Solution[i] {
			return false
		}
	}
	if a.Verify != nil && !reflect.DeepEqual(a.Verify, b.Verify) {
		return false
	}
	return a.Browser == nil || *a.Browser == *b.Browser
}

// renderYAML writes specs back in the task file format, one document each.
func renderYAML(t *testing.T, specs []Spec) []byte {
	t.Helper()
	var out bytes.Buffer
	for i, s := range specs {
		if i > 0 {
			out.WriteString("---\n")
		}
		b, err := yaml.Marshal(renderSpec(t, s))
		if err != nil {
			t.Fatalf("spec %s does not render: %v", s.ID, err)
		}
		out.Write(b)
	}
	return out.Bytes()
}

// renderSpec is a spec as a YAML mapping in the task file's own fields,
// in the documented order.
func renderSpec(t *testing.T, s Spec) *yaml.Node {
	t.Helper()
	m := &yaml.Node{Kind: yaml.MappingNode}
	add := func(key string, v any) {
		m.Content = append(m.Content, yamlNode(t, key), yamlNode(t, v))
	}
	dur := func(d Duration) string { return time.Duration(d).String() }
	add("id", s.ID)
	add("instruction", s.Instruction)
	if s.Image != "" {
		add("image", s.Image)
	}
	if s.Files != nil {
		add("files", s.Files)
	}
	if s.Env != nil {
		add("env", s.Env)
	}
	if s.Setup != nil {
		add("setup", s.Setup)
	}
	if s.Start != nil {
		add("start", s.Start)
	}
	if s.BranchStart != nil {
		add("branch_start", s.BranchStart)
	}
	if v := s.Verify; v != nil {
		vm := map[string]any{"cmd": v.Cmd}
		if v.Reward != "" {
			vm["reward"] = v.Reward
		}
		if v.TimeoutMS != 0 {
			vm["timeout"] = (time.Duration(v.TimeoutMS) * time.Millisecond).String()
		}
		add("verify", vm)
	}
	lm := map[string]any{}
	l := s.Limits
	for k, v := range map[string]int64{"max_steps": int64(l.MaxSteps), "output_cap": int64(l.OutputCap), "memory_mb": l.MemoryMB, "pids": l.Pids} {
		if v != 0 {
			lm[k] = v
		}
	}
	if l.CPUs != 0 {
		lm["cpus"] = l.CPUs
	}
	if l.ActionTimeout != 0 {
		lm["action_timeout"] = dur(l.ActionTimeout)
	}
	if l.EpisodeTimeout != 0 {
		lm["episode_timeout"] = dur(l.EpisodeTimeout)
	}
	if len(lm) > 0 {
		add("limits", lm)
	}
	if s.Solution != nil {
		var actions []map[string]any
		for _, a := range s.Solution {
			b, err := json.Marshal(a)
			if err != nil {
				t.Fatalf("action %v: %v", a, err)
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			var am map[string]any
			if err := dec.Decode(&am); err != nil {
				t.Fatalf("action %s: %v", b, err)
			}
			for k, v := range am {
				if n, ok := v.(json.Number); ok {
					i, err := n.Int64()
					if err != nil {
						t.Fatalf("action %s: field %s: %v", b, k, err)
					}
					am[k] = i
				}
			}
			actions = append(actions, am)
		}
		add("solution", actions)
	}
	if b := s.Browser; b != nil {
		bm := map[string]any{}
		if b.Width != 0 {
			bm["viewport"] = strconv.Itoa(b.Width) + "x" + strconv.Itoa(b.Height)
		}
		if b.Start != "" {
			bm["start"] = b.Start
		}
		if b.Observe != "" {
			bm["observe"] = b.Observe
		}
		if b.LoadTimeout != 0 {
			bm["load_timeout"] = dur(b.LoadTimeout)
		}
		add("browser", bm)
	}
	return m
}

// yamlNode builds the node of a rendered value. Strings are written
// double-quoted: yaml.v3's encoder picks a literal block for some strings
// that its own parser then cannot read (a string starting with a line
// break: the crasher testdata/fuzz/FuzzParse/eefb51c1dc613882 found it in
// Node.Encode), and the property under test is the task parser, not the
// encoder's choice of style.
func yamlNode(t *testing.T, v any) *yaml.Node {
	t.Helper()
	scalar := func(tag, value string, style yaml.Style) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value, Style: style}
	}
	switch x := v.(type) {
	case string:
		return scalar("!!str", x, yaml.DoubleQuotedStyle)
	case int64:
		return scalar("!!int", strconv.FormatInt(x, 10), 0)
	case float64:
		return scalar("!!float", strconv.FormatFloat(x, 'g', -1, 64), 0)
	case []string:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for _, e := range x {
			n.Content = append(n.Content, yamlNode(t, e))
		}
		return n
	case map[string]string:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			n.Content = append(n.Content, yamlNode(t, k), yamlNode(t, x[k]))
		}
		return n
	case map[string]any:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			n.Content = append(n.Content, yamlNode(t, k), yamlNode(t, x[k]))
		}
		return n
	case []map[string]any:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for _, e := range x {
			n.Content = append(n.Content, yamlNode(t, e))
		}
		return n
	}
	t.Fatalf("render: no YAML form for %T", v)
	return nil
}

// sameLimits compares limits field by field (Capabilities is a list).
func sameLimits(a, b Limits) bool {
	return a.MaxSteps == b.MaxSteps && a.ActionTimeout == b.ActionTimeout && a.EpisodeTimeout == b.EpisodeTimeout &&
		a.OutputCap == b.OutputCap && a.CPUs == b.CPUs && a.MemoryMB == b.MemoryMB && a.Pids == b.Pids &&
		slices.Equal(a.Capabilities, b.Capabilities)
}

// FuzzHarborFolder loads Harbor task folders whose task.toml, instruction
// and one symlink (its place in the folder and its target) come from the
// fuzzer, beside a secret file outside the folder that the link may name
// (by absolute path, or climbing out with ../). Whatever the folder holds:
//
//   - LoadHarbor does not panic, and a refusal is a SpecError;
//   - the secret's content is in no spec it accepts (its JSON, which a
//     manifest records and a sandbox receives) and in no error it returns:
//     a task's files are read from inside its folder only.
func FuzzHarborFolder(f *testing.F) {
	const toml = "[environment]\ndocker_image = \"forkline/debian\"\n"
	for _, seed := range []struct {
		toml, instruction, link, target string
	}{
		{toml, "Do it.", "tests/shadow", "SECRET"},
		{toml, "Do it.", "instruction.md", "SECRET"},
		{toml, "Do it.", "solution/solve.sh", "SECRET"},
		{toml, "Do it.", "tests/deep/er/x", "../../../../outside/secret"},
		{toml, "Do it.", "tests/ok", "../solution/solve.sh"},
		{toml, "Do it.", "tests", "../outside"},
		{toml, "Do it.", "environment", "../outside"},
		{"[environment]\nbuild_timeout_sec = 10\n", "Build it.", "environment/Dockerfile", "SECRET"},
		{"[environment]\nbuild_timeout_sec = 10\n", "Build it.", "environment/leak", "SECRET"},
		{toml, "Do it.", "task.toml", "SECRET"},
		{"schema_version = \"1.4\"\n[verifier]\ntimeout_sec = 5\n" + toml, "x", "tests/a", "/"},
	} {
		f.Add(seed.toml, []byte(seed.instruction), seed.link, seed.target)
	}
	f.Fuzz(func(t *testing.T, tomlText string, instruction []byte, link, target string) {
		root := t.TempDir()
		outside := path.Join(root, "outside")
		secret := "HOST-SECRET-" + strconv.Itoa(len(root)) + "-do-not-leak"
		mustWrite := func(p string, data []byte) {
			if err := os.MkdirAll(path.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		mustWrite(path.Join(outside, "secret"), []byte(secret))
		dir := path.Join(root, "a-task")
		mustWrite(path.Join(dir, "task.toml"), []byte(tomlText))
		mustWrite(path.Join(dir, "instruction.md"), instruction)
		mustWrite(path.Join(dir, "tests", "test.sh"), []byte("echo 1 > /logs/verifier/reward.txt\n"))
		mustWrite(path.Join(dir, "solution", "solve.sh"), []byte("true\n"))
		mustWrite(path.Join(dir, "environment", "Dockerfile"), []byte("FROM forkline/debian\n"))
		// The link goes at a clean path inside the folder, replacing what
		// is there; SECRET stands for the secret's absolute path.
		clean := path.Clean(link)
		if link == "" || path.IsAbs(clean) || clean == "." || strings.HasPrefix(clean, "..") || strings.ContainsRune(link, 0) ||
			strings.Count(clean, "/") > 4 || len(clean) > 100 || strings.ContainsRune(target, 0) || len(target) > 200 {
			return
		}
		if target == "SECRET" {
			target = path.Join(outside, "secret")
		}
		at := path.Join(dir, clean)
		if err := os.MkdirAll(path.Dir(at), 0o755); err != nil {
			return // a file where a directory would be
		}
		if err := os.RemoveAll(at); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, at); err != nil {
			return
		}
		s, err := LoadHarbor(dir)
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) && !strings.HasPrefix(err.Error(), "task: ") {
				t.Fatalf("refusal %v (%T) is neither a SpecError nor the package's", err, err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the refusal holds the secret: %v", err)
			}
			return
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("an accepted spec does not marshal: %v", err)
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Fatalf("the secret reached the spec through %s -> %s", clean, target)
		}
	})
}
