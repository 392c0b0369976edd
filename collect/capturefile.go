package collect

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/forkline/forkline/capture"
)

// LoadCapture reads a capture policy from a YAML file (collect -capture FILE):
//
//	text: cap:65536   # full, or cap:N bytes per observation
//	pixels: hash      # full, hash (each distinct PNG once in blobs/) or none
//	a11y: full        # full or none
//	tokens: keep      # keep or drop
//
// Fields left out keep DefaultPolicy's values. Unknown fields, wrong types
// and unknown values are errors that name the file, line and field.
func LoadCapture(path string) (capture.Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return capture.Policy{}, fmt.Errorf("collect: capture file: %w", err)
	}
	return ParseCapture(path, data)
}

// ParseCapture is LoadCapture on data read from name.
func ParseCapture(name string, data []byte) (capture.Policy, error) {
	p := capture.DefaultPolicy()
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return p, fmt.Errorf("collect: %s: empty capture file (fields: a11y, pixels, text, tokens)", name)
		}
		return p, fmt.Errorf("collect: %s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	n := doc.Content[0]
	errAt := func(n *yaml.Node, field, format string, args ...any) error {
		loc := fmt.Sprintf("%s:%d:%d", name, n.Line, n.Column)
		if field == "" {
			return fmt.Errorf("collect: %s: %s", loc, fmt.Sprintf(format, args...))
		}
		return fmt.Errorf("collect: %s: field %s: %s", loc, field, fmt.Sprintf(format, args...))
	}
	if n.Kind != yaml.MappingNode {
		return p, errAt(n, "", "a capture policy is a mapping of text, pixels, a11y and tokens")
	}
	fields := map[string]*string{"pixels": &p.Pixels, "a11y": &p.A11y, "tokens": &p.Tokens}
	known := []string{"a11y", "pixels", "text", "tokens"}
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
		switch dst, ok := fields[k.Value]; {
		case k.Value == "text":
			c, err := capture.ParseText(v.Value)
			if err != nil {
				return p, errAt(v, "text", "%s", strings.TrimPrefix(err.Error(), "capture: "))
			}
			p.TextCap = c
		case ok:
			*dst = v.Value
			if err := p.Validate(); err != nil {
				return p, errAt(v, k.Value, "%s", strings.TrimPrefix(err.Error(), "capture: "))
			}
		default:
			sort.Strings(known)
			return p, errAt(k, k.Value, "unknown field (known: %s)", strings.Join(known, ", "))
		}
	}
	return p, nil
}
