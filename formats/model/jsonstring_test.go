package model

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// encodingJSON is the oracle: encoding/json's string with HTML escaping
// off, as every target writes JSON.
func encodingJSON(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// jsonStringSeeds are every class encoding/json escapes or replaces, the
// HTML characters it leaves alone with escaping off, runs long enough for
// the eight-byte scan (special bytes at each offset of a word), and
// invalid UTF-8 of every shape.
func jsonStringSeeds() []string {
	p := []string{
		`"`, `\`, "<", ">", "&", "/", "'", "\x7f", " ", "a", "Z9",
		"\u2028", "\u2029", "\u2027", "\u202a", "é", "中文", "😀", "\ufffd", "\u00a0",
		"\x80", "\xff", "\xc3", "\xe2\x80", "\xf0\x9f\x98", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "\xfe\xfe",
		"plain ascii text longer than eight bytes \" with a quote\x01",
		"\xe2\x80\xa8\xe2\x80\xa9 abcdefgh\xff", `{"kind":"exec","cmd":"echo $((1+2))"}`,
		"line one\nline two\r\n\ttabbed",
	}
	for c := range 0x20 {
		p = append(p, string(rune(c)))
	}
	for off := range 9 {
		for _, c := range []string{`"`, `\`, "\n", "\x80", "\u2028", "é"} {
			p = append(p, strings.Repeat("x", off)+c+strings.Repeat("y", 16-off))
		}
	}
	return p
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	seeds := jsonStringSeeds()
	for _, a := range seeds {
		for _, b := range seeds {
			s := a + b
			if got, want := string(AppendJSONString([]byte("prefix"), s)), "prefix"+encodingJSON(t, s); got != want {
				t.Fatalf("%q: hand %s, encoding/json %s", s, got, want)
			}
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range jsonStringSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(AppendJSONString(nil, s)), encodingJSON(t, s); got != want {
			t.Fatalf("%q: hand %s, encoding/json %s", s, got, want)
		}
	})
}
