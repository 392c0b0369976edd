package capture

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// manifestForm is the policy as a dataset manifest records it, with the
// text cap in its flag form: {"text":"full","pixels":"hash","a11y":"full",
// "tokens":"keep"}.
type manifestForm struct {
	Text   string `json:"text"`
	Pixels Pixels `json:"pixels"`
	A11y   A11y   `json:"a11y"`
	Tokens Tokens `json:"tokens"`
}

// MarshalManifest is the policy as it is recorded in a dataset manifest.
func (p Policy) MarshalManifest() json.RawMessage {
	b, _ := json.Marshal(manifestForm{p.TextFlag(), p.Pixels, p.A11y, p.Tokens})
	return b
}

// DecodeManifest reads a policy from its manifest form: the one decoder
// every reader of a dataset's capture policy uses (export, replay, resume,
// merge). An absent entry (nil, empty or JSON null) is DefaultPolicy, as a
// dataset without one was collected under it; fields left out keep
// DefaultPolicy's values. A field or a value this build does not know is an
// error: the dataset was captured under a policy it can neither reproduce
// nor describe.
func DecodeManifest(raw json.RawMessage) (Policy, error) {
	def := DefaultPolicy()
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return def, nil
	}
	f := manifestForm{Text: def.TextFlag(), Pixels: def.Pixels, A11y: def.A11y, Tokens: def.Tokens}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Policy{}, fmt.Errorf("capture: manifest capture policy %s: %w", raw, err)
	}
	textCap, err := ParseText(f.Text)
	if err != nil {
		return Policy{}, fmt.Errorf("capture: manifest capture policy: %w", err)
	}
	p := Policy{TextCap: textCap, Pixels: f.Pixels, A11y: f.A11y, Tokens: f.Tokens}
	if err := p.Validate(); err != nil {
		return Policy{}, fmt.Errorf("capture: manifest capture policy: %w", err)
	}
	return p, nil
}
