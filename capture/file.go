package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// fileFields are the fields of a capture file, sorted.
var fileFields = []string{"a11y", "pixels", "text", "tokens"}

// Load reads a capture policy from a YAML file (collect -capture FILE):
//
//	text: cap:65536   # full, or cap:N bytes per observation
//	pixels: hash      # full, hash (each distinct PNG once in blobs/) or none
//	a11y: full        # full or none
//	tokens: keep      # keep or drop
//
// Fields left out keep DefaultPolicy's values. Unknown fields, wrong types,
// unknown values and a second YAML document are errors that name the file,
// line and field; on any error the policy returned is the zero Policy, never
// a half-read one.
func Load(path string) (Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Policy{}, fmt.Errorf("capture: capture file: %w", err)
	}
	return Parse(path, data)
}

// Parse is Load on data read from name.
func Parse(name string, data []byte) (Policy, error) {
	p, err := parse(name, data)
	if err != nil {
		return Policy{}, err
	}
	return p, nil
}

func parse(name string, data []byte) (Policy, error) {
	p := DefaultPolicy()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return p, fmt.Errorf("capture: %s: empty capture file (fields: %s)", name, strings.Join(fileFields, ", "))
		}
		return p, fmt.Errorf("capture: %s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	// A second document would be silently ignored otherwise: a file meant
	// to hold one policy that holds two is a mistake worth naming.
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := 0
		if err == nil {
			line = extra.Line
			if len(extra.Content) > 0 {
				line = extra.Content[0].Line
			}
		}
		return p, fmt.Errorf("capture: %s:%d: a capture file holds one YAML document (one mapping of %s), this one holds more",
			name, line, strings.Join(fileFields, ", "))
	}
	n := doc.Content[0]
	errAt := func(n *yaml.Node, field, format string, args ...any) error {
		loc := fmt.Sprintf("%s:%d:%d", name, n.Line, n.Column)
		if field == "" {
			return fmt.Errorf("capture: %s: %s", loc, fmt.Sprintf(format, args...))
		}
		return fmt.Errorf("capture: %s: field %s: %s", loc, field, fmt.Sprintf(format, args...))
	}
	if n.Kind != yaml.MappingNode {
		return p, errAt(n, "", "a capture policy is a mapping of text, pixels, a11y and tokens")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			return p, errAt(k, k.Value, "appears twice")
		}
		seen[k.Value] = true
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return p, errAt(v, k.Value, "must be a string")
		}
		var err error
		switch k.Value {
		case "text":
			p.TextCap, err = ParseText(v.Value)
		case "pixels":
			err = p.Pixels.Set(v.Value)
		case "a11y":
			err = p.A11y.Set(v.Value)
		case "tokens":
			err = p.Tokens.Set(v.Value)
		default:
			return p, errAt(k, k.Value, "unknown field (known: %s)", strings.Join(fileFields, ", "))
		}
		if err != nil {
			return p, errAt(v, k.Value, "%s", strings.TrimPrefix(err.Error(), "capture: "))
		}
	}
	return p, nil
}
