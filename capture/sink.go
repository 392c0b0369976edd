package capture

import (
	"context"

	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/tokens"
)

// Sink is one episode's runtime.StepSink. It converts each step to a row as
// the step arrives (so under pixels hash or none a screenshot is hashed and
// its bytes leave memory at once, but for one copy per distinct blob) and
// holds the rows, the episode's new blobs and its model turns until the
// episode is committed. Like every StepSink it is written by the goroutine
// running the rollout; read it once the rollout has returned.
type Sink struct {
	policy            Policy
	episodeID, taskID string
	seen              SetIndex // blobs of this episode; the run-wide dedup is BlobRecorder's
	rows              []schemas.StepRow
	blobs             []schemas.BlobRow
	turns             []tokens.Turn
	start             *runtime.Observation
}

// NewSink returns the sink of one episode of a task under policy p.
func NewSink(p Policy, episodeID, taskID string) *Sink {
	return &Sink{policy: p, episodeID: episodeID, taskID: taskID, seen: SetIndex{}}
}

// WriteStep captures s. It never fails.
func (b *Sink) WriteStep(_ context.Context, s runtime.Step) error {
	row, blobs := b.policy.Row(b.episodeID, b.taskID, s, b.seen)
	b.rows = append(b.rows, row)
	b.blobs = append(b.blobs, blobs...)
	// Every model turn goes to the assembler, with or without ids: a turn
	// that came back without them must cut the record, not vanish into the
	// next prompt as environment tokens.
	if m := s.Model; m != nil && b.policy.Tokens == TokensKeep {
		b.turns = append(b.turns, turnOf(m))
	}
	return nil
}

// turnOf is a model turn for the assembler: an agent harness's call that
// did not continue the one before cuts the record there.
func turnOf(m *runtime.ModelEvent) tokens.Turn {
	t := tokens.Turn{PromptIDs: m.PromptIDs, ResponseIDs: m.ResponseIDs, Logprobs: m.Logprobs}
	if m.Harness != nil {
		t.Cut = m.Harness.Cut
	}
	return t
}

// AddBlobs keeps blobs the episode's record names besides its steps' (an
// agent harness's output and side calls), each distinct payload once.
func (b *Sink) AddBlobs(blobs []schemas.BlobRow) {
	for _, bl := range blobs {
		if b.seen.Add(bl.SHA256) {
			b.blobs = append(b.blobs, bl)
		}
	}
}

// Prefix tells the sink that its episode is a branch continuing from
// steps, its ancestors' (the shared prefix, stored once, in them): their
// model turns open the episode's token record, so that a branch's record
// covers its whole trajectory and starts with its parent's exactly; no row
// is kept for them. Call it before the first WriteStep.
func (b *Sink) Prefix(steps []runtime.Step) {
	for _, s := range steps {
		if m := s.Model; m != nil && b.policy.Tokens == TokensKeep && (len(m.PromptIDs) > 0 || len(m.ResponseIDs) > 0) {
			b.turns = append(b.turns, turnOf(m))
		}
	}
}

// WriteStart captures the episode's first observation (the start page of a
// GUI episode), which StartRow puts in the episode row. It never fails.
func (b *Sink) WriteStart(o runtime.Observation) {
	b.start = &o
}

// StartRow keeps the first observation, when one was captured, in ep under
// the sink's policy, and adds the blob of its screenshot to the episode's.
// It is called once, when the episode's rows are built.
func (b *Sink) StartRow(ep *schemas.EpisodeRow) {
	if b.start == nil {
		return
	}
	b.blobs = append(b.blobs, b.policy.Start(ep, *b.start, b.seen)...)
	b.start = nil
}

// Steps are the rows captured so far, in step order.
func (b *Sink) Steps() []schemas.StepRow { return b.rows }

// Blobs are the payloads the steps refer to by hash, each once.
func (b *Sink) Blobs() []schemas.BlobRow { return b.blobs }

// TokenRecord assembles the episode's token record from the model turns
// captured into ep's token columns (nothing when no turn reported token ids,
// or the policy drops tokens). A record cut before a turn (drift, or a turn
// without ids) sets token_drift and token_cut. A record that breaks its
// invariants is an error and ep is left as it was: a wrong record must
// never reach a trainer.
func (b *Sink) TokenRecord(ep *schemas.EpisodeRow) error {
	if len(b.turns) == 0 {
		return nil
	}
	r, err := tokens.Assemble(b.turns)
	if err == nil {
		err = r.Check()
	}
	if err != nil {
		return err
	}
	ep.PromptIDs, ep.ResponseIDs, ep.ResponseMask, ep.ResponseLogprobs = r.PromptIDs, r.ResponseIDs, r.Mask, r.Logprobs
	ep.TokenTurns, ep.TokenDrift = int32(r.Turns), r.Drift
	ep.TokenCut = nil
	if r.Cut != "" {
		cut := r.Cut
		ep.TokenCut = &cut
	}
	return nil
}
