package model

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/forkline/forkline/runtime"
)

// reencode is the oracle of the arguments: the object decoded and every
// key and value encoded again by encoding/json without HTML escaping.
func reencode(t *testing.T, obj []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(obj))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	out := []byte{'{'}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		kb, _ := EncodeJSON(k)
		vb, _ := EncodeJSON(v)
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, kb...), ':'), vb...)
	}
	return append(out, '}')
}

// Arguments rewrite only the HTML escapes, and give what decoding and
// encoding again without them gives, for every kind of string an action
// may hold.
func TestArgumentsUnescapeLikeAReencode(t *testing.T) {
	for _, cmd := range []string{"wc -l < notes.txt", "a && b > c", `echo "\u003c"`, `printf '\\u003c'`, "tab\tnew\nline",
		"bell\x07 esc\x1b", "é ü 中", "x\u2028y\u2029z", `back\slash "quoted"`, "<>&<>&", "plain"} {
		a := runtime.Action{Kind: runtime.ActExec, Cmd: cmd, TimeoutMS: 5}
		canon, err := a.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Arguments(string(canon))
		if err != nil {
			t.Fatal(err)
		}
		want := reencode(t, append([]byte("{"), canon[len(`{"kind":"exec",`):]...))
		if !bytes.Equal(got, want) {
			t.Errorf("cmd %q: Arguments %s, re-encoded %s", cmd, got, want)
		}
		var back map[string]any
		if err := json.Unmarshal(got, &back); err != nil || back["cmd"] != cmd {
			t.Errorf("cmd %q: arguments %s read back as %v (%v)", cmd, got, back["cmd"], err)
		}
	}
}

// Every kind's arguments are its canonical form's fields, decoded and
// encoded again by encoding/json without HTML escaping: zero optional
// fields left out, required ones kept, negative and large integers, and
// strings of every escape class.
func TestArgumentsOfEveryKindLikeAReencode(t *testing.T) {
	strs := []string{"", "plain", "a && b > c <d>", `back\slash "q"`, "tab\tnl\n\x01", "é 中 \u2028", "\xff bad"}
	var acts []runtime.Action
	for i, s := range strs {
		n := i*1000 - 2500
		acts = append(acts,
			runtime.Action{Kind: runtime.ActExec, Cmd: s + "x", TimeoutMS: int64(i) * 1 << 40},
			runtime.Action{Kind: runtime.ActReadFile, Path: s},
			runtime.Action{Kind: runtime.ActWriteFile, Path: "p" + s, Content: s},
			runtime.Action{Kind: runtime.ActScreenshot},
			runtime.Action{Kind: runtime.ActClick, X: n, Y: i, Button: s},
			runtime.Action{Kind: runtime.ActType, Text: s},
			runtime.Action{Kind: runtime.ActKey, Keys: s},
			runtime.Action{Kind: runtime.ActScroll, DX: n, DY: -n},
			runtime.Action{Kind: runtime.ActNavigate, URL: "https://x/?q=" + s},
			runtime.Action{Kind: runtime.ActWait, MS: int64(n)},
			runtime.Action{Kind: runtime.ActDone, Answer: s},
			runtime.Action{Kind: runtime.ActSendKeys, Keys: s},
			runtime.Action{Kind: runtime.ActReadScreen, Scrollback: i},
		)
	}
	checked := 0
	for _, a := range acts {
		if a.Validate() != nil {
			continue // an action a dataset cannot hold (an empty path)
		}
		checked++
		canon, err := a.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Arguments(string(canon))
		if err != nil {
			t.Fatalf("%s: %v", canon, err)
		}
		prefix := `{"kind":"` + string(a.Kind) + `"`
		rest := bytes.TrimPrefix(canon, []byte(prefix))
		want := []byte("{}")
		if len(rest) > 1 {
			want = reencode(t, append([]byte("{"), rest[1:]...))
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: arguments %s, re-encoded %s", canon, got, want)
		}
	}
	if checked < len(acts)/2 {
		t.Fatalf("only %d of %d actions valid", checked, len(acts))
	}
}
