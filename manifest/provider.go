package manifest

import (
	"encoding/json"
	"fmt"

	"github.com/forkline/forkline/providers"
)

// Provider is the manifest's "provider" entry: the provider a dataset's
// episodes ran on, how it was opened and how replicas were reset.
type Provider struct {
	Name string `json:"name"`
	// Capabilities are what the provider said it can do; nil where the
	// writer did not record them (replay -record).
	Capabilities *providers.Capabilities `json:"capabilities,omitempty"`
	// Params are the provider settings as given (-provider-opt).
	Params map[string]string `json:"params"`
	// Reset is the pool's reset strategy (fork or recreate); "" where not
	// recorded.
	Reset string `json:"reset,omitempty"`
	// Image is the image that replaced every task's (replay -image), ""
	// for none.
	Image string `json:"image,omitempty"`
}

// Encode is the entry's JSON.
func (p Provider) Encode() json.RawMessage { return mustEncode(p) }

// DecodeProvider reads a manifest's provider entry.
func DecodeProvider(raw json.RawMessage) (Provider, error) {
	var p Provider
	if err := json.Unmarshal(raw, &p); err != nil {
		return Provider{}, fmt.Errorf("manifest: provider: %w", err)
	}
	return p, nil
}

// mustEncode marshals an entry; the entries hold nothing that fails to
// encode (no channels, funcs or unsupported floats), so an error is a bug.
func mustEncode(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("manifest: encoding %T: %v", v, err))
	}
	return b
}
