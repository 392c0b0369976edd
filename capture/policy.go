// Package capture owns what a dataset keeps of each step and how: the
// capture policy (typed: text cap, pixels, accessibility trees, tokens), its
// YAML form (collect -capture FILE) and its manifest form (one encoder, one
// decoder), the conversion of runtime steps into steps-table rows, the step
// sink an episode streams its steps into, the episode's token record, and
// the run-wide blob recorder that stores each distinct payload once.
//
// It knows runtime steps, schemas rows and token ids. It does not know where
// rows go (formats/shard), how steps were produced (providers, policies,
// pools) or what tasks, rewards or trainers are.
package capture

import (
	"fmt"
	"strconv"
	"strings"
)

// Pixels is what a step keeps of its screenshot.
type Pixels string

// Pixels modes.
const (
	// PixelsFull keeps the PNG bytes in the step row.
	PixelsFull Pixels = "full"
	// PixelsHash stores each distinct PNG once in the blobs table and keeps
	// its sha256 in the step: forked replicas' identical screenshots cost
	// one blob.
	PixelsHash Pixels = "hash"
	// PixelsNone keeps neither; the hash and size are still recorded.
	PixelsNone Pixels = "none"
)

// A11y is what a step keeps of its accessibility tree.
type A11y string

// A11y modes.
const (
	A11yFull A11y = "full" // keep the tree
	A11yNone A11y = "none" // drop it
)

// Tokens is what a step keeps of the model's token ids.
type Tokens string

// Tokens modes.
const (
	// TokensKeep records token ids, masks and logprobs, and the episode's
	// assembled token record.
	TokensKeep Tokens = "keep"
	// TokensDrop leaves every token column empty.
	TokensDrop Tokens = "drop"
)

// Policy says what each step keeps. The zero value is not valid; start from
// DefaultPolicy.
type Policy struct {
	// TextCap is the most bytes of an observation's output kept in the steps
	// table; 0 keeps everything. A capped output keeps its head and tail with
	// an explicit marker between.
	TextCap int    `json:"text_cap"`
	Pixels  Pixels `json:"pixels"`
	A11y    A11y   `json:"a11y"`
	Tokens  Tokens `json:"tokens"`
}

// DefaultPolicy keeps text whole, pixels by hash (identical screenshots from
// forked replicas are stored once), accessibility trees and tokens.
func DefaultPolicy() Policy {
	return Policy{TextCap: 0, Pixels: PixelsHash, A11y: A11yFull, Tokens: TokensKeep}
}

// Validate reports a field with a value it does not know.
func (p Policy) Validate() error {
	if p.TextCap < 0 {
		return fmt.Errorf("capture: text cap %d is negative", p.TextCap)
	}
	if _, err := ParsePixels(string(p.Pixels)); err != nil {
		return err
	}
	if _, err := ParseA11y(string(p.A11y)); err != nil {
		return err
	}
	_, err := ParseTokens(string(p.Tokens))
	return err
}

// ParsePixels reads a pixels mode: full, hash or none.
func ParsePixels(s string) (Pixels, error) {
	return parseMode("pixels", s, PixelsFull, PixelsHash, PixelsNone)
}

// ParseA11y reads an a11y mode: full or none.
func ParseA11y(s string) (A11y, error) { return parseMode("a11y", s, A11yFull, A11yNone) }

// ParseTokens reads a tokens mode: keep or drop.
func ParseTokens(s string) (Tokens, error) { return parseMode("tokens", s, TokensKeep, TokensDrop) }

func parseMode[M ~string](field, s string, known ...M) (M, error) {
	for _, k := range known {
		if s == string(k) {
			return k, nil
		}
	}
	names := make([]string, len(known))
	for i, k := range known {
		names[i] = string(k)
	}
	return "", fmt.Errorf("capture: %s %q is not known (known: %s)", field, s, strings.Join(names, ", "))
}

// String and Set make each mode a flag.Value, so a command line refuses an
// unknown mode when it is parsed, naming the known ones.
func (m Pixels) String() string { return string(m) }

// Set parses s into m.
func (m *Pixels) Set(s string) error { return set(m, s, ParsePixels) }

func (m A11y) String() string { return string(m) }

// Set parses s into m.
func (m *A11y) Set(s string) error { return set(m, s, ParseA11y) }

func (m Tokens) String() string { return string(m) }

// Set parses s into m.
func (m *Tokens) Set(s string) error { return set(m, s, ParseTokens) }

// set parses s into *m, leaving *m as it was when s is not known.
func set[M ~string](m *M, s string, parse func(string) (M, error)) error {
	v, err := parse(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ParseText reads the -text flag: "full" or "cap:N".
func ParseText(s string) (int, error) {
	if s == "full" {
		return 0, nil
	}
	if n, ok := strings.CutPrefix(s, "cap:"); ok {
		v, err := strconv.Atoi(n)
		if err == nil && v > 0 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("capture: text %q is not known (known: full, cap:N with N > 0 bytes)", s)
}

// TextFlag is the inverse of ParseText.
func (p Policy) TextFlag() string {
	if p.TextCap == 0 {
		return "full"
	}
	return fmt.Sprintf("cap:%d", p.TextCap)
}
