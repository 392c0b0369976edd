package model

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestArgumentsObjectLikeEncodingJSON checks the arguments a recorded tool
// call shows against encoding/json: text that is a JSON object is that
// object compacted (json.Valid, then json.Compact), anything else is the
// text as a JSON string, and empty text is {}.
func TestArgumentsObjectLikeEncodingJSON(t *testing.T) {
	for _, text := range []string{
		"", "  \n", `{}`, `{"a": 1}`, " \t{\"a\":[1, 2], \"b\":{\"c\":null}}\n",
		`{"a":"<b>&\u003c"}`, `{"a":1} x`, `{"a":1}{"b":2}`, `{"a":`, `{"a":1,}`,
		`[1,2]`, `"str"`, `not json`, `{"a":"tab	inside"}`, "{\"a\":\"\xff\"}",
	} {
		want := func() string {
			trimmed := strings.TrimSpace(text)
			if trimmed == "" {
				return "{}"
			}
			if trimmed[0] == '{' && json.Valid([]byte(trimmed)) {
				var b bytes.Buffer
				require.NoError(t, json.Compact(&b, []byte(trimmed)))
				return b.String()
			}
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			require.NoError(t, enc.Encode(text))
			return strings.TrimSuffix(b.String(), "\n")
		}()
		require.Equal(t, want, string(argumentsObject(text)), "text %q", text)
	}
}
