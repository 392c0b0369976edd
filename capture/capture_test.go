package capture

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/tokens"
)

func TestParse(t *testing.T) {
	def := DefaultPolicy()
	with := func(f func(*Policy)) Policy { p := def; f(&p); return p }
	good := []struct {
		name, yaml string
		want       Policy
	}{
		{"every field", "text: cap:4096\npixels: full\na11y: none\ntokens: drop\n",
			Policy{TextCap: 4096, Pixels: PixelsFull, A11y: A11yNone, Tokens: TokensDrop}},
		{"left out keeps the default", "pixels: none\n", with(func(p *Policy) { p.Pixels = PixelsNone })},
		{"text full", "text: full\n", def},
		{"comments", "# lean\npixels: hash # once per distinct PNG\n", def},
		{"one document with a start marker", "---\npixels: none\n", with(func(p *Policy) { p.Pixels = PixelsNone })},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse("c.yaml", []byte(c.yaml))
			require.NoError(t, err)
			require.Equal(t, c.want, p)
		})
	}
	bad := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown field", "pixels: hash\npixles: none\n", []string{"c.yaml:2:1", "field pixles", "known: a11y, pixels, text, tokens"}},
		{"unknown value", "a11y: partial\n", []string{"c.yaml:1:7", "field a11y", `"partial" is not known`, "known: full, none"}},
		{"bad text", "text: cap:0\n", []string{"c.yaml:1:7", "field text", "cap:N with N > 0"}},
		{"not a string", "pixels: [hash]\n", []string{"c.yaml:1:9", "field pixels", "must be a string"}},
		{"empty value", "tokens:\n", []string{"field tokens", "must be a string"}},
		{"twice", "pixels: hash\npixels: none\n", []string{"c.yaml:2:1", "appears twice"}},
		{"not a mapping", "- hash\n", []string{"c.yaml:1:1", "mapping"}},
		{"empty file", "", []string{"empty capture file"}},
		{"syntax", "pixels: [\n", []string{"c.yaml"}},
		// A second document used to be ignored: the policy of the first
		// was used and the second, perhaps the one meant, silently dropped.
		{"second document", "pixels: none\n---\npixels: full\n", []string{"c.yaml:3", "one YAML document"}},
		{"second document, broken", "pixels: none\n---\n[\n", []string{"c.yaml", "one YAML document"}},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse("c.yaml", []byte(c.yaml))
			require.Error(t, err)
			require.ErrorContains(t, err, "capture: ")
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
			// Never a half-changed policy beside the error.
			require.Equal(t, Policy{}, p)
		})
	}
	_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestModesAreFlagValues(t *testing.T) {
	p := DefaultPolicy()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&p.Pixels, "pixels", "")
	fs.Var(&p.A11y, "a11y", "")
	fs.Var(&p.Tokens, "tokens", "")
	require.NoError(t, fs.Parse([]string{"-pixels", "none", "-a11y", "none", "-tokens", "drop"}))
	require.Equal(t, Policy{Pixels: PixelsNone, A11y: A11yNone, Tokens: TokensDrop}, p)
	err := fs.Parse([]string{"-pixels", "jpeg"})
	require.ErrorContains(t, err, `pixels "jpeg" is not known (known: full, hash, none)`)
	require.Equal(t, PixelsNone, p.Pixels, "a refused value leaves the mode as it was")
}

func TestManifestRoundTrip(t *testing.T) {
	for _, p := range []Policy{
		DefaultPolicy(),
		{TextCap: 100, Pixels: PixelsFull, A11y: A11yNone, Tokens: TokensDrop},
		{TextCap: 0, Pixels: PixelsNone, A11y: A11yFull, Tokens: TokensKeep},
	} {
		got, err := DecodeManifest(p.MarshalManifest())
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	// The manifest form is part of every dataset: it must not change.
	require.JSONEq(t, `{"text":"cap:100","pixels":"full","a11y":"none","tokens":"drop"}`,
		string(Policy{TextCap: 100, Pixels: PixelsFull, A11y: A11yNone, Tokens: TokensDrop}.MarshalManifest()))
}

func TestDecodeManifest(t *testing.T) {
	for _, absent := range []string{"", "null", "  "} {
		p, err := DecodeManifest(json.RawMessage(absent))
		require.NoError(t, err)
		require.Equal(t, DefaultPolicy(), p, "an absent entry %q", absent)
	}
	p, err := DecodeManifest(json.RawMessage(`{"pixels":"none"}`))
	require.NoError(t, err)
	require.Equal(t, Policy{Pixels: PixelsNone, A11y: A11yFull, Tokens: TokensKeep}, p, "fields left out keep the default")

	for _, c := range []struct{ raw, want string }{
		{`{"text":"cap:x"}`, `text "cap:x" is not known`},
		{`{"pixels":"jpeg"}`, `pixels "jpeg" is not known`},
		{`{"video":"none"}`, `unknown field "video"`},
		{`{"text_cap":0}`, `unknown field "text_cap"`},
		{`[1]`, "cannot unmarshal"},
		{`{"pixels":`, "unexpected EOF"},
	} {
		p, err := DecodeManifest(json.RawMessage(c.raw))
		require.ErrorContains(t, err, c.want, c.raw)
		require.ErrorContains(t, err, "capture: manifest capture policy")
		require.Equal(t, Policy{}, p)
	}
}

func TestBlobRecorderStoresEachBlobOnce(t *testing.T) {
	blob := func(h string) schemas.BlobRow { return schemas.BlobRow{SHA256: h, Data: []byte(h)} }
	r := NewBlobRecorder()
	r.Stored("old")
	var written []string
	commit := func(fresh []schemas.BlobRow) error {
		for _, b := range fresh {
			written = append(written, b.SHA256)
		}
		return nil
	}
	require.NoError(t, r.Commit([]schemas.BlobRow{blob("a"), blob("old"), blob("a"), blob("b")}, commit))
	require.Equal(t, []string{"a", "b"}, written, "blobs the dataset holds and repeats within a batch are left out")

	// A commit that fails stores nothing: the next episode with the blob
	// writes it.
	boom := errors.New("disk full")
	require.ErrorIs(t, r.Commit([]schemas.BlobRow{blob("c")}, func([]schemas.BlobRow) error { return boom }), boom)
	written = nil
	require.NoError(t, r.Commit([]schemas.BlobRow{blob("a"), blob("c")}, commit))
	require.Equal(t, []string{"c"}, written)
}

func TestSinkCapturesUnderThePolicy(t *testing.T) {
	png := []byte("\x89PNG fake")
	steps := []runtime.Step{
		{Index: 0, Action: runtime.Action{Kind: runtime.ActScreenshot},
			Observation: runtime.Observation{Screenshot: &runtime.Screenshot{PNG: png, Width: 2, Height: 1}, AXTree: `{"role":"x"}`},
			Model:       &runtime.ModelEvent{PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3}, Logprobs: []float32{-0.5}}},
		{Index: 1, Action: runtime.Action{Kind: runtime.ActScreenshot},
			Observation: runtime.Observation{Screenshot: &runtime.Screenshot{PNG: png, Width: 2, Height: 1}},
			Model:       &runtime.ModelEvent{PromptIDs: []int32{1, 2, 3, 9}, ResponseIDs: []int32{4}, Logprobs: []float32{-0.25}}},
	}
	for _, c := range []struct {
		name   string
		policy Policy
		blobs  int
		tokens bool
	}{
		{"default", DefaultPolicy(), 1, true},
		{"pixels full, tokens drop", Policy{Pixels: PixelsFull, A11y: A11yNone, Tokens: TokensDrop}, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewSink(c.policy, "ep", "task")
			for _, st := range steps {
				st.Started = time.Unix(1, 0)
				require.NoError(t, s.WriteStep(context.Background(), st))
			}
			require.Len(t, s.Steps(), 2)
			require.Len(t, s.Blobs(), c.blobs, "an episode's repeated screenshot is one blob under pixels hash")
			require.NotEmpty(t, s.Steps()[1].ScreenHash)
			require.Equal(t, c.policy.Pixels == PixelsFull, s.Steps()[0].Screenshot != nil)
			require.Equal(t, c.policy.A11y == A11yFull, s.Steps()[0].AXTree != "")
			var ep schemas.EpisodeRow
			require.NoError(t, s.TokenRecord(&ep))
			if !c.tokens {
				require.Empty(t, ep.ResponseIDs)
				return
			}
			require.Equal(t, []int32{1, 2}, ep.PromptIDs)
			require.Equal(t, []int32{3, 9, 4}, ep.ResponseIDs)
			require.Equal(t, []int32{1, 0, 1}, ep.ResponseMask, "the environment's token 9 is masked out")
			require.EqualValues(t, 2, ep.TokenTurns)
		})
	}
}

// The function calls a server returned are kept as the model wrote them,
// every one of them, in order: exports write these instead of the
// canonical action. A turn without native calls stores null.
func TestRowKeepsTheModelsToolCalls(t *testing.T) {
	step := runtime.Step{Action: runtime.Action{Kind: runtime.ActExec, Cmd: "ls > x"}, Model: &runtime.ModelEvent{
		ToolCalls: []runtime.ToolCall{
			{ID: "chatcmpl-tool-1", Name: "exec", Arguments: `{"cmd": "ls > x", "timeout_ms": "5"}`},
			{ID: "chatcmpl-tool-2", Name: "read_file", Arguments: `{"path":"a"}`},
		}}}
	row, _ := DefaultPolicy().Row("ep", "t", step, nil)
	require.NotNil(t, row.ToolCalls)
	require.Equal(t, `[{"id":"chatcmpl-tool-1","name":"exec","arguments":"{\"cmd\": \"ls > x\", \"timeout_ms\": \"5\"}"},`+
		`{"id":"chatcmpl-tool-2","name":"read_file","arguments":"{\"path\":\"a\"}"}]`, *row.ToolCalls)
	var back []runtime.ToolCall
	require.NoError(t, json.Unmarshal([]byte(*row.ToolCalls), &back))
	require.Equal(t, step.Model.ToolCalls, back)

	step.Model.ToolCalls = nil
	row, _ = DefaultPolicy().Row("ep", "t", step, nil)
	require.Nil(t, row.ToolCalls)
}

// A model turn without token ids between two turns with them is passed to
// the assembler: the record is cut there and flagged missing_ids, rather
// than the unknown turn's tokens being masked 0 as the environment's inside
// the next prompt. Provenance reaches the step columns.
func TestSinkCutsTheRecordAtAModelTurnWithoutIDs(t *testing.T) {
	require.Equal(t, schemas.TokenCutDrift, tokens.CutDrift)
	require.Equal(t, schemas.TokenCutMissingIDs, tokens.CutMissingIDs)
	s := NewSink(DefaultPolicy(), "ep", "task")
	prov := runtime.Provenance{Path: runtime.TokenPathTITO, Endpoints: []string{"/tokenize", "/v1/completions"}, TemplateSHA256: "abc"}
	turns := []*runtime.ModelEvent{
		{PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3}, ResponseMask: []int8{1}, Logprobs: []float32{-1}, Provenance: prov},
		{Model: "m", FinishReason: "tool_calls"}, // came back without ids
		{PromptIDs: []int32{1, 2, 3, 4, 7, 8, 5}, ResponseIDs: []int32{6}, ResponseMask: []int8{1}, Logprobs: []float32{-2}},
	}
	for i, m := range turns {
		require.NoError(t, s.WriteStep(context.Background(), runtime.Step{Index: i, Action: runtime.Action{Kind: runtime.ActExec, Cmd: "true"}, Model: m}))
	}
	// A step without a model turn is not one.
	require.NoError(t, s.WriteStep(context.Background(), runtime.Step{Index: 3, Action: runtime.Action{Kind: runtime.ActExec, Cmd: "true"}}))
	var ep schemas.EpisodeRow
	require.NoError(t, s.TokenRecord(&ep))
	require.True(t, ep.TokenDrift)
	require.NotNil(t, ep.TokenCut)
	require.Equal(t, schemas.TokenCutMissingIDs, *ep.TokenCut)
	require.EqualValues(t, 1, ep.TokenTurns)
	require.Equal(t, []int32{3}, ep.ResponseIDs)
	require.Equal(t, []int32{1}, ep.ResponseMask)

	rows := s.Steps()
	require.Equal(t, "tito", *rows[0].TokenPath)
	require.Equal(t, "/tokenize,/v1/completions", *rows[0].TokenEndpoints)
	require.Equal(t, "abc", *rows[0].ChatTemplateSHA256)
	require.Nil(t, rows[1].TokenPath)
	require.Nil(t, rows[3].TokenEndpoints)
}

// Step undoes Row as far as a row keeps a step, so a branch re-made from a
// dataset continues from the steps the model saw.
func TestStepUndoesRow(t *testing.T) {
	in := runtime.Step{Index: 3, Action: runtime.Action{Kind: runtime.ActExec, Cmd: "ls"},
		Observation: runtime.Observation{Output: []byte{0xff, 'a'}, OutputBytes: 2, ExitCode: 1, Error: true, ErrorKind: runtime.ErrExitStatus,
			Screenshot: &runtime.Screenshot{PNG: []byte("png"), Width: 4, Height: 2}, AXTree: `{"role":"x"}`},
		Model: &runtime.ModelEvent{Model: "m", RawText: "t", Reasoning: "r", FinishReason: "tool_calls", PromptIDs: []int32{1, 2},
			ResponseIDs: []int32{3}, ResponseMask: []int8{1}, Logprobs: []float32{-0.5}, Usage: runtime.Usage{PromptTokens: 2, CompletionTokens: 1}}}
	p := DefaultPolicy()
	p.Pixels = PixelsFull
	row, _ := p.Row("e", "t", in, nil)
	out, err := Step(row)
	require.NoError(t, err)
	require.Equal(t, in.Index, out.Index)
	require.Equal(t, in.Action, out.Action)
	require.Equal(t, in.Observation.Output, out.Observation.Output, "the exact bytes, not the UTF-8 form")
	require.Equal(t, in.Observation.Screenshot, out.Observation.Screenshot)
	require.Equal(t, in.Observation.AXTree, out.Observation.AXTree)
	require.Equal(t, []runtime.Action{in.Action}, out.Model.Actions)
	out.Model.Actions = nil
	require.Equal(t, in.Model, out.Model)
	_, err = Step(schemas.StepRow{StepIndex: 2, ActionJSON: `{"kind":"nope"}`})
	require.ErrorContains(t, err, "step 2")

	// A sink told of a prefix starts its token record with the prefix's turns.
	sink := NewSink(DefaultPolicy(), "child", "t")
	sink.Prefix([]runtime.Step{in})
	next := in
	next.Index, next.Model = 4, &runtime.ModelEvent{PromptIDs: []int32{1, 2, 3, 9}, ResponseIDs: []int32{5}, Logprobs: []float32{-1}}
	require.NoError(t, sink.WriteStep(t.Context(), next))
	require.Len(t, sink.Steps(), 1, "the prefix's rows are its ancestors'")
	var ep schemas.EpisodeRow
	require.NoError(t, sink.TokenRecord(&ep))
	require.Equal(t, []int32{1, 2}, ep.PromptIDs)
	require.Equal(t, []int32{3, 9, 5}, ep.ResponseIDs)
	require.Equal(t, []int32{1, 0, 1}, ep.ResponseMask)
}
