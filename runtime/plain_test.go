package runtime

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The fast paths of Action's JSON give exactly encoding/json's bytes and
// values, or step aside: the canonical form's quoting of every string is
// json.Marshal's.
func TestPlainJSONMatchesEncodingJSON(t *testing.T) {
	for _, v := range []string{"", "ls -la", "a<b", "x&y", `q"uote`, `back\slash`, "tab\there", "é", "\u2028", "\x7f", "\xff",
		"~ plain ascii {}[]:,", "\x00", "line\n"} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendMarshalString([]byte("prefix"), v); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Errorf("appendMarshalString(%q) = %s, json.Marshal %s", v, got, want)
		}
	}
	for _, raw := range []string{`""`, `"ls"`, `"a\u003cb"`, `"\n"`, `"é"`, `"\ud800"`, `0`, `-0`, `12`, `1e3`, `1.5`, `null`, `"7"`,
		`99999999999999999999`, `"a\"b"`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\u00e9\u00E9"`, `"\u2028"`, `"\ud83d\ude00"`,
		`"\u0000"`, `"x\u0026y\u003e"`, "\"\xff\\n\"", `"wc -l \u003c notes.txt"`, `"3\n"`} {
		var s, js string
		if decodePlain(json.RawMessage(raw), &s) {
			if err := json.Unmarshal([]byte(raw), &js); err != nil || s != js {
				t.Errorf("string %s: fast %q, json %q (%v)", raw, s, js, err)
			}
		}
		var n, jn int
		if decodePlain(json.RawMessage(raw), &n) {
			if err := json.Unmarshal([]byte(raw), &jn); err != nil || n != jn {
				t.Errorf("int %s: fast %d, json %d (%v)", raw, n, jn, err)
			}
		}
		var n64, jn64 int64
		if decodePlain(json.RawMessage(raw), &n64) {
			if err := json.Unmarshal([]byte(raw), &jn64); err != nil || n64 != jn64 {
				t.Errorf("int64 %s: fast %d, json %d (%v)", raw, n64, jn64, err)
			}
		}
	}
}

// flatObject reads what json.Unmarshal reads into a map of raw values, or
// steps aside; it never accepts what json.Unmarshal refuses.
func TestFlatObjectMatchesEncodingJSON(t *testing.T) {
	for _, in := range []string{`{}`, `{"kind":"exec","cmd":"ls"}`, `{"kind":"click","x":10,"y":-3}`, `{"a":"1","a":"2"}`,
		`{"kind":"exec","cmd":"wc -l \u003c f"}`, `{"x":01}`, `{"x":-}`, `{"x":1.5}`, `{"x":1e3}`, `{"x":true}`, `{"x":null}`,
		`{"x":"a"`, `{"x":"a",}`, `{"x" :"a"}`, `{ "x":"a"}`, `{"x":"a"}}`, `{"x""a"}`, `{"x":"a"b}`, `{"x":[1]}`, "{\"x\":\"\xff\"}",
		`{"x":-0}`, `{"x":0}`, `{,}`, `{"":""}`, `{"x":"a\"b"}`, `{"x":"\\"}`, `{"x":"\x"}`, `{"x":"\u12"}`, `{"x":"\u12g4"}`,
		`{"x":"\"}`, `{"x":"a\n","y":"\u00e9"}`, "{\"x\":\"a\tb\"}", `{"x":"\ud800"}`, `{"kind":"write_file","path":"p","content":"3\n"}`} {
		fields, ok := flatObject([]byte(in), nil)
		got := map[string]json.RawMessage{}
		for _, f := range fields {
			got[string(f.name)] = f.value // the last wins, as in json's map
		}
		for k := range got {
			if v, _ := fields.get(k); string(v) != string(got[k]) {
				t.Errorf("%s: get(%q) = %s, the last member is %s", in, k, v, got[k])
			}
		}
		var want map[string]json.RawMessage
		err := json.Unmarshal([]byte(in), &want)
		if !ok {
			continue
		}
		if err != nil {
			t.Errorf("%s: flatObject read %v, json.Unmarshal refuses it: %v", in, got, err)
			continue
		}
		if len(got) != len(want) {
			t.Errorf("%s: flatObject %v, json %v", in, got, want)
		}
		for k, v := range want {
			if string(got[k]) != string(v) {
				t.Errorf("%s: key %q: flatObject %s, json %s", in, k, got[k], v)
			}
		}
	}
}

// A kind is written into the canonical JSON as it is, in quotes: that is
// its JSON only when it needs no escape.
func TestKindsArePlain(t *testing.T) {
	for _, k := range ActionKinds() {
		b, err := json.Marshal(string(k))
		if err != nil || string(b) != `"`+string(k)+`"` {
			t.Errorf("kind %q encodes as %s", k, b)
		}
	}
}
