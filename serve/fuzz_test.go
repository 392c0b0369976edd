package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/forkline/forkline/runtime"
)

// FuzzClientMessage feeds arbitrary bytes to what a session does with a
// message, up to the episode: the budget reader (with a message limit the
// input chooses), then the decoding of the envelope and of a reset's,
// step's or release's data. Whatever a client sends:
//
//   - nothing panics;
//   - the reader returns the message exactly when it fits the limit,
//     refuses it as too big otherwise, and gives its whole budget share
//     back;
//   - a refusal carries one of OpenEnv's error codes (or the branching
//     extension's), as the client is answered;
//   - an accepted step is a canonical action that validates and survives
//     its JSON round trip (what is recorded is what runs), and its token
//     record, if any, is consistent (one logprob per response id);
//   - an accepted reset keeps the rules checkReset states.
func FuzzClientMessage(f *testing.F) {
	for _, seed := range []string{
		`{"type":"reset","data":{}}`,
		`{"type":"reset","data":{"task_id":"t","seed":3,"episode_id":"e-1"}}`,
		`{"type":"reset","data":{"from_checkpoint":"cp-1","episode_id":"b"}}`,
		`{"type":"reset","data":{"seed":-1}}`,
		`{"type":"step","data":{"kind":"exec","cmd":"ls -la","timeout_ms":500}}`,
		`{"type":"step","data":{"kind":"write_file","path":"a/b.txt","content":"x\u0000y"}}`,
		`{"type":"step","data":{"kind":"done","answer":"42","metadata":{"response_ids":[1,2],"logprobs":[-0.5,-0.1],"prompt_ids":[7]}}}`,
		`{"type":"step","data":{"kind":"click","x":3,"y":4,"button":"left"}}`,
		`{"type":"step","data":{"kind":"exec"}}`,
		`{"type":"step"}`,
		`{"type":"state"}`,
		`{"type":"close"}`,
		`{"type":"checkpoint"}`,
		`{"type":"release","data":{"checkpoint_id":"cp-1"}}`,
		`{"type":"jump"}`,
		`{"type":1}`,
		`{"type":"step","data":[]}`,
		`{"type":"step","data":{"kind":"exec","cmd":"a"},"type":"state"}`,
		`{"type": "step", `,
		`null`,
	} {
		f.Add([]byte(seed), uint16(len(seed)))
	}
	codes := []string{codeInvalidJSON, codeUnknownType, codeValidation, codeExecution, codeCapacityReached, codeFactory,
		codeSession, codeCheckpointNotFound, codeCheckpointLimit}
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		max := int64(limit%2048) + 1
		b := newBudget(4*max, max)
		got, release, err := b.read(context.Background(), bytes.NewReader(data), newArrival(time.Minute, func() {}))
		switch {
		case int64(len(data)) <= max:
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("a %d-byte message under a %d-byte limit: %v, %q", len(data), max, err, got)
			}
			release()
			release() // idempotent
		case !errors.Is(err, errTooBig):
			t.Fatalf("a %d-byte message over a %d-byte limit: %v", len(data), max, err)
		}
		if !b.sem.TryAcquire(4 * max) {
			t.Fatal("the message's budget share was not given back")
		}

		check := func(err error) {
			t.Helper()
			if we := wireErrorOf(err); !slices.Contains(codes, we.Code) || we.Message == "" {
				t.Fatalf("refusal %v answered as %+v", err, we)
			}
		}
		m, err := parseClientMessage(data)
		if err != nil {
			check(err)
			return
		}
		switch m.Type {
		case msgReset:
			r, _, err := parseReset(m.Data)
			if err != nil {
				check(err)
				return
			}
			if checkReset(r) != nil {
				t.Fatalf("an accepted reset breaks its rules: %+v", r)
			}
		case msgStep:
			dec, err := parseAction(m.Data)
			if err != nil {
				check(err)
				return
			}
			if err := dec.Action.Validate(); err != nil {
				t.Fatalf("an accepted action does not validate: %v", err)
			}
			raw, err := json.Marshal(dec.Action)
			if err != nil {
				t.Fatalf("an accepted action does not marshal: %v", err)
			}
			var back runtime.Action
			if err := json.Unmarshal(raw, &back); err != nil || !sameAction(back, dec.Action) {
				t.Fatalf("an accepted action changes through its record: %s: %+v vs %+v (%v)", raw, back, dec.Action, err)
			}
			if mo := dec.Model; mo != nil && len(mo.Logprobs) > 0 && len(mo.Logprobs) != len(mo.ResponseIDs) {
				t.Fatalf("a token record with %d logprobs for %d response ids", len(mo.Logprobs), len(mo.ResponseIDs))
			}
		}
	})
}

// sameAction compares actions as their JSON records do.
func sameAction(a, b runtime.Action) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
