package model

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/forkline/forkline/runtime"
)

// reencode is what the arguments were before unescapeHTML rewrote the
// bytes itself: the object decoded and every key and value encoded again
// without HTML escaping.
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
