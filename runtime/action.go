package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ActionKind names one canonical action of the agent-computer interface.
type ActionKind string

// The canonical actions. Their JSON form is fixed (see Action); trajectories
// stay model-agnostic and replayable because every policy emits these.
const (
	ActExec       ActionKind = "exec"       // run a shell command: cmd, timeout_ms
	ActReadFile   ActionKind = "read_file"  // path
	ActWriteFile  ActionKind = "write_file" // path, content
	ActScreenshot ActionKind = "screenshot" // no fields
	ActClick      ActionKind = "click"      // x, y, button
	ActType       ActionKind = "type"       // text
	ActKey        ActionKind = "key"        // keys
	ActScroll     ActionKind = "scroll"     // dx, dy
	ActNavigate   ActionKind = "navigate"   // url
	ActWait       ActionKind = "wait"       // ms
	ActDone       ActionKind = "done"       // answer
	// The terminal actions drive a program on a pseudo-terminal (a REPL,
	// an editor, a prompt that waits for a key): send_keys types keys,
	// read_screen returns the terminal's visible text.
	ActSendKeys   ActionKind = "send_keys"   // keys
	ActReadScreen ActionKind = "read_screen" // scrollback
)

// actionFields lists, per kind, the JSON fields that kind carries and which
// of them are required. The order is the canonical field order on the wire.
var actionFields = map[ActionKind][]fieldSpec{
	ActExec:       {{"cmd", true}, {"timeout_ms", false}},
	ActReadFile:   {{"path", true}},
	ActWriteFile:  {{"path", true}, {"content", false}},
	ActScreenshot: {},
	ActClick:      {{"x", true}, {"y", true}, {"button", false}},
	ActType:       {{"text", true}},
	ActKey:        {{"keys", true}},
	ActScroll:     {{"dx", false}, {"dy", false}},
	ActNavigate:   {{"url", true}},
	ActWait:       {{"ms", true}},
	ActDone:       {{"answer", false}},
	ActSendKeys:   {{"keys", true}},
	ActReadScreen: {{"scrollback", false}},
}

type fieldSpec struct {
	name     string
	required bool
}

// ActionKinds returns every canonical kind, sorted.
func ActionKinds() []ActionKind {
	out := make([]ActionKind, 0, len(actionFields))
	for k := range actionFields {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ActionFieldNames returns the JSON field names of kind in canonical order, and
// whether each is required. It lets consumers (tool schemas, parsers) derive
// their shapes from the one definition here.
func ActionFieldNames(kind ActionKind) (names []string, required []bool, ok bool) {
	specs, ok := actionFields[kind]
	if !ok {
		return nil, nil, false
	}
	for _, f := range specs {
		names = append(names, f.name)
		required = append(required, f.required)
	}
	return names, required, true
}

// Action is one canonical action. Only the fields of its Kind are meaningful;
// its JSON form is {"kind": K, ...fields of K} with nothing else, e.g.
//
//	{"kind":"exec","cmd":"ls -la","timeout_ms":5000}
//	{"kind":"click","x":10,"y":20,"button":"left"}
//
// Durations are integers in milliseconds (timeout_ms, ms) so the unit is in
// the name and the value survives every JSON implementation unchanged.
type Action struct {
	Kind ActionKind

	Cmd       string // exec
	TimeoutMS int64  // exec; 0 means the session's default
	Path      string // read_file, write_file
	Content   string // write_file
	X, Y      int    // click
	Button    string // click: left (default), right, middle
	Text      string // type
	Keys      string // key, e.g. "Enter" or "Control+a"
	DX, DY    int    // scroll
	URL       string // navigate
	MS        int64  // wait
	Answer    string // done
	// Scrollback is how many lines above the visible screen read_screen
	// returns too (0: the screen only).
	Scrollback int
}

// ErrInvalidAction is wrapped by every error that Validate and UnmarshalJSON
// return for an action that is not canonical.
var ErrInvalidAction = errors.New("invalid action")

// Validate reports whether a is a well-formed canonical action.
func (a Action) Validate() error {
	if _, ok := actionFields[a.Kind]; !ok {
		return fmt.Errorf("runtime: %w: unknown kind %q (known: %s)", ErrInvalidAction, a.Kind, kindList())
	}
	switch a.Kind {
	case ActExec:
		if strings.TrimSpace(a.Cmd) == "" {
			return fmt.Errorf("runtime: %w: exec needs a non-empty cmd", ErrInvalidAction)
		}
		if a.TimeoutMS < 0 {
			return fmt.Errorf("runtime: %w: exec timeout_ms is negative", ErrInvalidAction)
		}
	case ActReadFile, ActWriteFile:
		if a.Path == "" {
			return fmt.Errorf("runtime: %w: %s needs a path", ErrInvalidAction, a.Kind)
		}
	case ActClick:
		switch a.Button {
		case "", "left", "right", "middle":
		default:
			return fmt.Errorf("runtime: %w: click button %q (known: left, middle, right)", ErrInvalidAction, a.Button)
		}
	case ActKey, ActSendKeys:
		if a.Keys == "" {
			return fmt.Errorf("runtime: %w: %s needs keys", ErrInvalidAction, a.Kind)
		}
	case ActReadScreen:
		if a.Scrollback < 0 {
			return fmt.Errorf("runtime: %w: read_screen scrollback is negative", ErrInvalidAction)
		}
	case ActNavigate:
		if a.URL == "" {
			return fmt.Errorf("runtime: %w: navigate needs a url", ErrInvalidAction)
		}
	case ActWait:
		if a.MS < 0 {
			return fmt.Errorf("runtime: %w: wait ms is negative", ErrInvalidAction)
		}
	}
	return nil
}

func kindList() string {
	ks := ActionKinds()
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// scalar returns the named JSON field of a without boxing it: the string
// of a string field (isString), else the integer.
func (a *Action) scalar(name string) (s string, n int64, isString bool) {
	switch name {
	case "cmd":
		return a.Cmd, 0, true
	case "timeout_ms":
		return "", a.TimeoutMS, false
	case "path":
		return a.Path, 0, true
	case "content":
		return a.Content, 0, true
	case "x":
		return "", int64(a.X), false
	case "y":
		return "", int64(a.Y), false
	case "button":
		return a.Button, 0, true
	case "text":
		return a.Text, 0, true
	case "keys":
		return a.Keys, 0, true
	case "dx":
		return "", int64(a.DX), false
	case "dy":
		return "", int64(a.DY), false
	case "url":
		return a.URL, 0, true
	case "ms":
		return "", a.MS, false
	case "answer":
		return a.Answer, 0, true
	case "scrollback":
		return "", int64(a.Scrollback), false
	}
	panic("runtime: no action field " + name)
}

// fieldPointer returns a pointer to the named field, for decoding.
func (a *Action) fieldPointer(name string) any {
	switch name {
	case "cmd":
		return &a.Cmd
	case "timeout_ms":
		return &a.TimeoutMS
	case "path":
		return &a.Path
	case "content":
		return &a.Content
	case "x":
		return &a.X
	case "y":
		return &a.Y
	case "button":
		return &a.Button
	case "text":
		return &a.Text
	case "keys":
		return &a.Keys
	case "dx":
		return &a.DX
	case "dy":
		return &a.DY
	case "url":
		return &a.URL
	case "ms":
		return &a.MS
	case "answer":
		return &a.Answer
	case "scrollback":
		return &a.Scrollback
	}
	panic("runtime: no action field " + name)
}

// MarshalJSON writes the canonical form: kind first, then the kind's fields in
// canonical order. Optional fields at their zero value are left out, so equal
// actions always have equal bytes.
//
// The zero Action (no kind) marshals as null: it marks a model turn that
// produced no action.
func (a Action) MarshalJSON() ([]byte, error) {
	if a.Kind == "" {
		return []byte("null"), nil
	}
	specs, ok := actionFields[a.Kind]
	if !ok {
		return nil, fmt.Errorf("runtime: %w: unknown kind %q", ErrInvalidAction, a.Kind)
	}
	// Room for a short action at once: growing from empty reallocated
	// three or four times.
	b := make([]byte, 0, 128)
	// A known kind is a lower-case identifier (TestKindsArePlain): its
	// JSON is itself in quotes.
	b = append(append(append(b, `{"kind":"`...), a.Kind...), '"')
	b = a.appendFields(b, specs, true, appendMarshalString)
	return append(b, '}'), nil
}

// AppendArguments appends a's fields as a JSON object: the canonical form
// (MarshalJSON) without its kind, the fields in canonical order, the
// integers in decimal and each string as appendString quotes it (a caller
// that writes JSON without HTML escaping gives its own quoting, which this
// package does not own). A tool call's arguments are this object.
func (a Action) AppendArguments(b []byte, appendString func([]byte, string) []byte) ([]byte, error) {
	specs, ok := actionFields[a.Kind]
	if !ok {
		return nil, fmt.Errorf("runtime: %w: unknown kind %q", ErrInvalidAction, a.Kind)
	}
	b = append(b, '{')
	b = a.appendFields(b, specs, false, appendString)
	return append(b, '}'), nil
}

// appendFields appends a's fields of specs as JSON object members, in
// their order, each after a comma when comma (else the first without one):
// an optional field at its zero value is left out, an integer written in
// decimal, a string as appendString quotes it. It is the one field loop of
// the canonical form (MarshalJSON) and of the arguments (AppendArguments).
func (a *Action) appendFields(b []byte, specs []fieldSpec, comma bool, appendString func([]byte, string) []byte) []byte {
	for _, f := range specs {
		str, n, isString := a.scalar(f.name)
		if !f.required && str == "" && n == 0 {
			continue
		}
		if comma {
			b = append(b, ',')
		}
		comma = true
		b = append(append(append(b, '"'), f.name...), '"', ':')
		if isString {
			b = appendString(b, str)
		} else {
			b = strconv.AppendInt(b, n, 10)
		}
	}
	return b
}

// appendMarshalString appends s quoted as json.Marshal quotes it (HTML
// characters escaped, invalid UTF-8 replaced): a string of printable ASCII
// without '"', '\\' and the HTML characters as it is, in quotes, without
// encoding/json's reflection; anything else through json.Marshal.
func appendMarshalString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always marshals
			return append(b, enc...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// flatObject reads a compact JSON object whose keys are plain strings and
// whose values are strings without escapes or control characters, or
// integers, as json.Unmarshal into a map[string]json.RawMessage would (a
// repeated key: the last wins), and reports whether data was such an
// object; anything else (whitespace, escapes, other values, a syntax
// error) is left to json.Unmarshal.
//
// The fields are appended to out in the order they appear (an action has
// a handful: a caller passes a small array's slice and nothing is
// allocated; a map per decoded action was a third of the decode).
func flatObject(data []byte, out rawFields) (rawFields, bool) {
	n := len(data)
	if n < 2 || data[0] != '{' || data[n-1] != '}' {
		return nil, false
	}
	i := 1
	if i == n-1 {
		return out, true
	}
	for {
		key, next, ok := plainString(data, i)
		if !ok || next >= n || data[next] != ':' {
			return nil, false
		}
		i = next + 1
		start := i
		switch {
		case i < n && data[i] == '"':
			if i, ok = escapedString(data, i); !ok {
				return nil, false
			}
		default:
			if i < n && data[i] == '-' {
				i++
			}
			digits := i
			for i < n && data[i] >= '0' && data[i] <= '9' {
				i++
			}
			if i == digits || (data[digits] == '0' && i-digits > 1) {
				return nil, false
			}
		}
		out = append(out, rawField{name: key, value: json.RawMessage(data[start:i])})
		if i == n-1 {
			return out, true
		}
		if data[i] != ',' {
			return nil, false
		}
		i++
	}
}

// rawField is one member of a decoded object: its key and its value's
// JSON.
type rawField struct {
	name  []byte
	value json.RawMessage
}

// rawFields are an object's members in order, a key possibly repeated.
type rawFields []rawField

// get returns the value of the last member named name, as json.Unmarshal
// into a map keeps the last.
func (r rawFields) get(name string) (json.RawMessage, bool) {
	for i := len(r) - 1; i >= 0; i-- {
		if string(r[i].name) == name {
			return r[i].value, true
		}
	}
	return nil, false
}

// plainString reads a JSON string at data[i] that holds no backslash and
// no control character; it returns its contents and the index after it.
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// escapedString reads a JSON string at data[i] whose escapes are all
// valid (a recorded command or file nearly always holds \n, \" or the
// \u003c Go writes for <) and no control character; it returns the index
// after it.
func escapedString(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			if j+1 >= len(data) {
				return 0, false
			}
			switch data[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if _, ok := hex4(data, j+2); !ok {
					return 0, false
				}
				j += 5
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

// hex4 reads the four hex digits of a \u escape at data[i].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// unescape is the contents of a JSON string body (checked by
// escapedString) as json.Unmarshal gives it, for bodies of valid UTF-8
// whose \u escapes are not surrogates; it reports false for anything else
// (json.Unmarshal's replacement characters and surrogate pairs are left
// to it).
func unescape(body []byte) (string, bool) {
	if !utf8.Valid(body) {
		return "", false
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		if i+1 >= len(body) {
			return "", false
		}
		i++
		switch body[i] {
		case '"', '\\', '/':
			out = append(out, body[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(body, i+1)
			if !ok || utf16.IsSurrogate(r) {
				return "", false
			}
			out = utf8.AppendRune(out, r)
			i += 4
		default:
			return "", false
		}
	}
	return string(out), true
}

// decodePlain sets *p from a JSON value (already checked to be valid JSON)
// when it is one json.Unmarshal would give the same result for without
// work (a string without escapes, of valid UTF-8; an integer that fits)
// and reports whether it did; anything else is json.Unmarshal's.
func decodePlain(raw json.RawMessage, p any) bool {
	switch x := p.(type) {
	case *string:
		if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
			return false
		}
		body := raw[1 : len(raw)-1]
		if bytes.IndexByte(body, '\\') >= 0 {
			s, ok := unescape(body)
			if ok {
				*x = s
			}
			return ok
		}
		if !utf8.Valid(body) {
			return false
		}
		*x = string(body)
		return true
	case *int:
		n, err := strconv.ParseInt(string(raw), 10, strconv.IntSize)
		if err != nil {
			return false
		}
		*x = int(n)
		return true
	case *int64:
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return false
		}
		*x = n
		return true
	}
	return false
}

// UnmarshalJSON accepts exactly the canonical form: a known kind, only that
// kind's fields, required fields present. Errors name the offending field.
func (a *Action) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*a = Action{}
		return nil
	}
	var buf [8]rawField
	raw, ok := flatObject(data, buf[:0])
	if !ok {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("runtime: %w: %v", ErrInvalidAction, err)
		}
		raw = make(rawFields, 0, len(m))
		for k, v := range m {
			raw = append(raw, rawField{name: []byte(k), value: v})
		}
	}
	kindRaw, ok := raw.get("kind")
	if !ok {
		return fmt.Errorf("runtime: %w: missing field \"kind\" (known kinds: %s)", ErrInvalidAction, kindList())
	}
	var kind string
	if !decodePlain(kindRaw, &kind) {
		if err := json.Unmarshal(kindRaw, &kind); err != nil {
			return fmt.Errorf("runtime: %w: field \"kind\" must be a string", ErrInvalidAction)
		}
	}
	specs, ok := actionFields[ActionKind(kind)]
	if !ok {
		return fmt.Errorf("runtime: %w: unknown kind %q (known: %s)", ErrInvalidAction, kind, kindList())
	}
	out := Action{Kind: ActionKind(kind)}
	for _, f := range specs {
		v, present := raw.get(f.name)
		if !present {
			if f.required {
				return fmt.Errorf("runtime: %w: %s needs field %q", ErrInvalidAction, kind, f.name)
			}
			continue
		}
		if decodePlain(v, out.fieldPointer(f.name)) {
			continue
		}
		if err := json.Unmarshal(v, out.fieldPointer(f.name)); err != nil {
			return fmt.Errorf("runtime: %w: %s field %q: %v", ErrInvalidAction, kind, f.name, err)
		}
	}
	for _, m := range raw {
		if name := m.name; string(name) != "kind" && !slices.ContainsFunc(specs, func(f fieldSpec) bool { return f.name == string(name) }) {
			names := []string{}
			for _, f := range specs {
				names = append(names, f.name)
			}
			return fmt.Errorf("runtime: %w: %s has no field %q (its fields: %s)", ErrInvalidAction, kind, name, strings.Join(names, ", "))
		}
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*a = out
	return nil
}

// String returns the canonical JSON, for logs and diffs.
func (a Action) String() string {
	b, err := a.MarshalJSON()
	if err != nil {
		return fmt.Sprintf("<invalid action %q>", a.Kind)
	}
	return string(b)
}
