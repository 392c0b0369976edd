package manifest

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/forkline/forkline/formats/shard"
)

// FuzzReadEntries feeds arbitrary manifests to Read, the decoding every
// reader of a dataset's entries shares. Its seeds are the manifests of the
// dataset corpus — one dataset of each kind collect and serve make
// (testdata/fuzz/FuzzReadEntries/corpus-*, written by cmd/forkline's
// TestDatasetCorpus -update) — and the cases below. Whatever the input:
//
//   - Read does not panic, and every problem is an *EntryError naming one
//     of the entries;
//   - an entry it reads, encoded again by its type, reads back the same,
//     and a policy entry without a recorded conversation shows the same
//     one.
func FuzzReadEntries(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"provider":{"name":"local","params":{"fork":"copy"},"reset":"fork"},"plan":{"repeats":2,"part":{"index":1,"count":2}}}`,
		`{"policy":{"name":"openai","options":{"observation_cap":"20"},"conversation":{"actions":"exec,done","task_actions":true,"enable_thinking":"false","chat_template_kwargs":"{\"a\":1}"}}}`,
		`{"summary":{"serve":{"addr":"x","reset_latency_ms":[{"kind":"fork/overlay","n":1,"p50":2,"p95":2}]}}}`,
		`{"summary":{"episodes":3,"reset_ms":{"fork/overlay":{"n":3,"p50":1,"p95":2}},"replay_of":"d","merged_from":[]}}`,
		`{"capture":{"pixels":"sometimes"},"policy":[],"provider":{"name":1}}`,
	} {
		f.Add([]byte(seed))
	}
	entries := []string{"provider", "policy", "plan", "capture", "summary"}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m shard.Manifest
		if json.Unmarshal(data, &m) != nil {
			return // not a manifest: formats/shard refuses it first
		}
		e, problems := Read(m)
		for _, p := range problems {
			var ee *EntryError
			if !errors.As(p, &ee) || !slices.Contains(entries, ee.Entry) {
				t.Fatalf("problem %v is not an EntryError naming an entry", p)
			}
		}
		if e.Provider != nil {
			back, err := DecodeProvider(e.Provider.Encode())
			if err != nil || !reflect.DeepEqual(*e.Provider, back) {
				t.Fatalf("provider written back reads %+v (%v), not %+v", back, err, *e.Provider)
			}
		}
		if e.Plan != nil {
			back, err := DecodePlan(e.Plan.Encode())
			if err != nil || !reflect.DeepEqual(*e.Plan, back) {
				t.Fatalf("plan written back reads %+v (%v), not %+v", back, err, *e.Plan)
			}
		}
		if e.Policy != nil {
			back, err := DecodePolicy(e.Policy.Encode())
			if err != nil {
				t.Fatalf("policy written back is refused: %v\n%s", err, e.Policy.Encode())
			}
			if !reflect.DeepEqual(e.Policy.Conversation, back.Conversation) || !reflect.DeepEqual(e.Policy.Options, back.Options) || e.Policy.Name != back.Name {
				t.Fatalf("policy written back reads %+v, not %+v", back, *e.Policy)
			}
			// Without a recorded conversation the options are what is
			// shown, before and after. (A conversation that leaves a
			// field out is shown with the option of that name; its typed
			// form records every field, so it is not written back: merge
			// and resume keep the entry as it was.)
			shown, err1 := e.Policy.Shown()
			again, err2 := back.Shown()
			if e.Policy.Conversation == nil && (err1 != nil || err2 != nil || !reflect.DeepEqual(shown, again)) {
				t.Fatalf("the conversation shown changes when the entry is written back: %+v (%v) vs %+v (%v)", shown, err1, again, err2)
			}
		}
		if e.Summary != nil {
			raw, err := e.Summary.Encode()
			if err != nil {
				t.Fatalf("a summary read does not encode: %v", err)
			}
			back, err := DecodeSummary(raw)
			if err != nil || !reflect.DeepEqual(*e.Summary, back) {
				t.Fatalf("summary written back reads %+v (%v), not %+v", back, err, *e.Summary)
			}
		}
	})
}
