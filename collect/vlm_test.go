package collect

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/export/loadertest"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/formats/verl"
	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/internal/oracle"
	"github.com/forkline/forkline/policy/openai/openaitest"
)

// vlmServer is a loopback stand-in for a VLM behind an OpenAI-compatible
// server (vLLM serving Qwen2.5-VL or Gemma 3): openaitest checks every
// request as such a server would receive it — content parts of type text
// and image_url, each image a base64 data URL that decodes, images in
// user messages only — and keeps what it saw; the scripted "model" here
// reads the accessibility tree in the request to choose its clicks, so an
// episode that succeeds proves the observation reached the model.
//
// Its token ids are a tokenizer of its own, made to behave as vLLM's do
// for a multimodal prompt: each message is [role id] + its bytes + [end],
// an image is [start] + 16 placeholder ids + [end of image] where it
// stands, and a reply's ids are exactly the assistant message as the
// policy sends it back. What it proves is the assembler's side: image
// placeholders between turns become environment tokens (mask 0) without a
// drift being flagged.
type vlmServer struct {
	*openaitest.Server
	maxImages int // the requests must carry at most this many images (0: any)
}

// vlmRequest is what one request carried.
type vlmRequest struct {
	task   string   // which scripted task the conversation is
	turn   int      // assistant messages before it
	bytes  int      // the body's size
	images []string // sha256 of the image parts' PNGs, in order
	tools  []string // the tools offered
	first  string   // the first user message's text
}

// Placeholder ids of the server's tokenizer.
const (
	idEnd        = 999
	idImageStart = 901
	idImageEnd   = 902
	idImage      = 900
	imageTokens  = 16
)

var roleIDs = map[string]int32{"system": 1000, "user": 1001, "assistant": 1002, "tool": 1003}

func startVLMServer(t *testing.T, maxImages int) *vlmServer {
	s := &vlmServer{maxImages: maxImages}
	s.Server = openaitest.Start(t, openaitest.Options{Model: s.respond})
	return s
}

func (s *vlmServer) url() string { return s.URL }

// requests returns what each request carried, in the order received.
func (s *vlmServer) requests() []vlmRequest {
	var out []vlmRequest
	for _, r := range s.Received() {
		out = append(out, readVLMRequest(r))
	}
	return out
}

func readVLMRequest(r openaitest.Request) vlmRequest {
	rec := vlmRequest{turn: r.Turn, bytes: len(r.Raw), tools: r.ToolNames(), first: r.FirstUserText()}
	for _, img := range r.Images() {
		rec.images = append(rec.images, img.SHA256)
	}
	switch {
	case strings.Contains(rec.first, "create an account for Ada"):
		rec.task = "web-form"
	case strings.Contains(rec.first, "fruit stand"):
		rec.task = "web-filter"
	default:
		rec.task = "shell"
	}
	return rec
}

// respond is the scripted model behind the server: the next action of the
// task's plan, with the token ids of the tokenizer above.
func (s *vlmServer) respond(r openaitest.Request) (openaitest.Turn, error) {
	rec := readVLMRequest(r)
	if s.maxImages > 0 && len(rec.images) > s.maxImages {
		return openaitest.Turn{}, fmt.Errorf("carried %d images, max_images is %d", len(rec.images), s.maxImages)
	}
	var prompt []int32
	var texts []string // every message's text, in order
	for i, m := range r.Messages {
		ids, err := messageIDs(m)
		if err != nil {
			return openaitest.Turn{}, fmt.Errorf("message %d: %v", i, err)
		}
		texts = append(texts, m.Text())
		prompt = append(append(append(prompt, roleIDs[m.Role]), ids...), idEnd)
	}
	prompt = append(prompt, roleIDs["assistant"])
	name, args, err := decide(rec.task, rec.turn, texts)
	if err != nil {
		return openaitest.Turn{}, fmt.Errorf("%s: %v", rec.task, err)
	}
	turn := openaitest.Turn{PromptIDs: prompt, ResponseIDs: append(renderCall(name, args), idEnd),
		ToolCalls: []openaitest.ToolCall{{ID: fmt.Sprintf("call_%d", rec.turn), Name: name, Args: args}}}
	if len(r.Tools) == 0 {
		// tool_mode=text: the model writes its call in the hermes dialect.
		text := fmt.Sprintf("<tool_call>\n{\"name\": %q, \"arguments\": %s}\n</tool_call>", name, args)
		turn.ToolCalls, turn.Content, turn.ResponseIDs = nil, text, append(bytesIDs(text), idEnd)
	}
	turn.Logprobs = make([]float64, len(turn.ResponseIDs))
	for i := range turn.Logprobs {
		turn.Logprobs[i] = -0.5
	}
	return turn, nil
}

// messageIDs are a message's content ids: its text's bytes, each image as
// [start] + placeholders + [end of image] where it stands; an assistant's
// native tool call as the call rendered.
func messageIDs(m openaitest.Message) ([]int32, error) {
	if m.Role == "assistant" {
		if text := m.Text(); text != "" && len(m.ToolCalls) == 0 {
			return bytesIDs(text), nil // tool_mode=text: the call is in the text
		}
		if len(m.ToolCalls) != 1 {
			return nil, fmt.Errorf("assistant message with %d tool calls", len(m.ToolCalls))
		}
		f, _ := m.ToolCalls[0]["function"].(map[string]any)
		name, _ := f["name"].(string)
		args, _ := f["arguments"].(string)
		return renderCall(name, args), nil
	}
	if m.Parts == nil {
		return bytesIDs(m.Text()), nil
	}
	var ids []int32
	for _, p := range m.Parts {
		if p.Image == nil {
			ids = append(ids, bytesIDs(p.Text)...)
			continue
		}
		if p.Image.MediaType != "image/png" || p.Image.Format != "png" {
			return nil, fmt.Errorf("an image named %s, of format %s, not the PNG a screenshot is", p.Image.MediaType, p.Image.Format)
		}
		ids = append(ids, idImageStart)
		for range imageTokens {
			ids = append(ids, idImage)
		}
		ids = append(ids, idImageEnd)
	}
	return ids, nil
}

func bytesIDs(s string) []int32 {
	out := make([]int32, len(s))
	for i := range len(s) {
		out[i] = int32(s[i])
	}
	return out
}

func renderCall(name, args string) []int32 { return bytesIDs("call " + name + " " + args) }

// axLine is one node line of aci.TreeText.
var axLine = regexp.MustCompile(`^\s*(\S+) "((?:[^"\\]|\\.)*)".* box=(\d+),(\d+),(\d+),(\d+)$`)

// target is a node the scripted model clicks, found by role and name.
type target struct{ roles, name string }

// scripts are the scripted model's plans: a click names its target, a
// type its text. The coordinates come only from the request's tree.
var scripts = map[string][]any{
	"web-form": {
		target{"textbox", "Full name"}, "Ada Lovelace",
		target{"textbox", "Email"}, "ada@example.org",
		target{"radio", "Pro"}, target{"checkbox", "I accept the terms"},
		target{"button", "Create account"},
	},
	"web-filter": {
		target{"searchbox textbox", "Filter fruits"}, "berry",
		target{"option", "Cranberry"},
	},
}

// decide is the scripted model: the next action of task's plan at turn,
// a click at the centre of its target's box in the latest tree shown.
func decide(task string, turn int, texts []string) (name, args string, err error) {
	if task == "shell" {
		if turn == 0 {
			return "write_file", `{"path":"out.txt","content":"hi\n"}`, nil
		}
		return "done", `{"answer":"wrote out.txt"}`, nil
	}
	plan := scripts[task]
	if turn >= len(plan) {
		return "done", `{"answer":"finished"}`, nil
	}
	switch step := plan[turn].(type) {
	case string:
		b, _ := json.Marshal(map[string]string{"text": step})
		return "type", string(b), nil
	case target:
		tree := ""
		for i := len(texts) - 1; i >= 0 && tree == ""; i-- {
			if _, after, ok := strings.Cut(texts[i], "accessibility tree:\n"); ok {
				tree = after
			}
		}
		if tree == "" {
			return "", "", fmt.Errorf("no accessibility tree in the request")
		}
		for _, line := range strings.Split(tree, "\n") {
			m := axLine.FindStringSubmatch(line)
			if m == nil || !slices.Contains(strings.Fields(step.roles), m[1]) {
				continue
			}
			if n, _ := strconv.Unquote(`"` + m[2] + `"`); n != step.name {
				continue
			}
			x, _ := strconv.Atoi(m[3])
			y, _ := strconv.Atoi(m[4])
			w, _ := strconv.Atoi(m[5])
			h, _ := strconv.Atoi(m[6])
			return "click", fmt.Sprintf(`{"x":%d,"y":%d}`, x+w/2, y+h/2), nil
		}
		return "", "", fmt.Errorf("no %s %q in the tree shown:\n%s", step.roles, step.name, tree)
	}
	return "", "", fmt.Errorf("bad plan")
}

// vlmRun collects dir's tasks once each through -policy openai against s.
func vlmRun(t *testing.T, s *vlmServer, dir string, opts map[string]string) Config {
	t.Helper()
	cfg := baseConfig(t, dir)
	cfg.Replicas, cfg.Repeats = 2, 1
	cfg.Policy = "openai"
	cfg.PolicyOptions = map[string]string{"base_url": s.url(), "model": "scripted-vlm"}
	for k, v := range opts {
		cfg.PolicyOptions[k] = v
	}
	cfg.Capture = capture.DefaultPolicy() // pixels hash: the bytes are in blobs/
	_, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Empty(t, s.Refusals(), "what the server found wrong in the requests")
	return cfg
}

// TestVLMWebTasksEndToEnd is the demonstration: both example web
// tasks solved through -policy openai by a model that only sees the page
// in its requests (observe=both, max_images=2), rewards 1; every image
// part decodes to a PNG the dataset stores, no request carries more than
// max_images, the first request of each episode shows the start page, and
// every step records the images its prompt carried.
func TestVLMWebTasksEndToEnd(t *testing.T) {
	needChromium(t)
	s := startVLMServer(t, 2)
	cfg := vlmRun(t, s, "../examples/tasks/web", map[string]string{"observe": "both", "max_images": "2"})

	eps, steps, rewards := readAll(t, cfg.Out)
	require.Len(t, eps, 2)
	for id, ep := range eps {
		require.Equal(t, "done", ep.ExitReason, "%s: %s", ep.TaskID, ep.Detail)
		require.NotNil(t, rewards[id].Value)
		require.Equal(t, 1.0, *rewards[id].Value, "%s: %s", ep.TaskID, rewards[id].Detail)
		require.NotNil(t, ep.StartScreenHash, "the start page is kept")
		require.Contains(t, *ep.StartAXTree, "WebArea")
	}

	blobs := map[string]bool{}
	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	for b, err := range ds.Blobs() {
		require.NoError(t, err)
		sum := sha256.Sum256(b.Data)
		require.Equal(t, b.SHA256, hex.EncodeToString(sum[:]))
		blobs[b.SHA256] = true
	}
	byTask := map[string][]vlmRequest{}
	for _, r := range s.requests() {
		byTask[r.task] = append(byTask[r.task], r)
		for _, h := range r.images {
			require.True(t, blobs[h], "an image sent (%s) is a stored PNG", h)
		}
		require.LessOrEqual(t, len(r.images), 2)
	}
	for id, ep := range eps {
		reqs := byTask[ep.TaskID]
		sort.Slice(reqs, func(i, j int) bool { return reqs[i].turn < reqs[j].turn })
		first := reqs[0]
		require.Equal(t, 0, first.turn)
		require.Contains(t, first.first, "[forkline: the start page]")
		require.Contains(t, first.first, "accessibility tree:")
		require.Equal(t, []string{*ep.StartScreenHash}, first.images, "the first request shows the start page's screenshot")
		if ep.TaskID == "web-form" {
			require.Contains(t, first.tools, "exec", "web-form allows exec")
		} else {
			require.NotContains(t, first.tools, "exec", "web-filter allows no shell action")
		}
		require.Contains(t, first.tools, "click")
		// Each step's prompt_images are the images of the request that
		// decided it.
		for _, st := range steps[id] {
			require.Equal(t, reqs[st.StepIndex].images, nilIfEmpty(st.PromptImages), "step %d", st.StepIndex)
		}
		// inspect shows the start page and the images of each prompt.
		ts, err := inspect.Transcripts(context.Background(), cfg.Out, []string{id}, inspect.TranscriptOptions{})
		require.NoError(t, err)
		require.Contains(t, ts[0].Start, "url: ")
		require.Equal(t, *ep.StartScreenHash, ts[0].StartScreenshot)
		require.Equal(t, reqs[0].images, ts[0].Steps[0].PromptImages)
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// TestVLMShellTaskOffersShellTools: a shell task's requests offer the
// shell actions only, and its first message is the instruction alone.
func TestVLMShellTaskOffersShellTools(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "shell.yaml"), []byte(`id: shell-write
instruction: Write hi into out.txt.
verify: {cmd: test "$(cat out.txt)" = hi}
`), 0o644))
	s := startVLMServer(t, 0)
	cfg := vlmRun(t, s, dir, map[string]string{"observe": "both"})
	eps, _, rewards := readAll(t, cfg.Out)
	require.Len(t, eps, 1)
	for id, ep := range eps {
		require.Equal(t, "done", ep.ExitReason, ep.Detail)
		require.Equal(t, 1.0, *rewards[id].Value)
		require.Nil(t, ep.StartOutput, "a shell shows nothing before it is acted on")
	}
	for _, r := range s.requests() {
		require.Equal(t, []string{"done", "exec", "read_file", "write_file"}, r.tools)
		require.Equal(t, "Write hi into out.txt.", r.first)
		require.Empty(t, r.images)
	}
}

// TestVLMTokenRecordWithImages: with every image kept, the episode's
// token record stays whole: the image placeholder ids the server put in
// each prompt are environment tokens (mask 0), the record is not flagged
// as drift, and every model turn is in it.
func TestVLMTokenRecordWithImages(t *testing.T) {
	needChromium(t)
	s := startVLMServer(t, 0)
	cfg := vlmRun(t, s, "../examples/tasks/web", map[string]string{"observe": "both", "tokens": "chat"})
	eps, steps, _ := readAll(t, cfg.Out)
	for id, ep := range eps {
		require.False(t, ep.TokenDrift, "%s: %v", ep.TaskID, ep.TokenCut)
		require.Equal(t, int32(len(steps[id])), ep.TokenTurns)
		placeholders := 0
		for i, tok := range ep.ResponseIDs {
			if tok == idImage {
				placeholders++
				require.Zero(t, ep.ResponseMask[i], "an image placeholder is an environment token")
			}
		}
		// Every screenshot after the start page went into a later prompt.
		shots := 0
		for _, st := range steps[id][:len(steps[id])-1] {
			if st.ScreenHash != "" {
				shots++
			}
		}
		require.Equal(t, shots*imageTokens, placeholders, "%s", ep.TaskID)
		var model int
		for _, m := range ep.ResponseMask {
			model += int(m)
		}
		require.Positive(t, model)
	}
	// verl-agent writes no multi_modal_data: placeholder ids without their
	// pixels are refused by name, not exported.
	rep, err := export.Run(context.Background(), export.Options{Inputs: []string{cfg.Out}, Target: "verl-agent", Out: filepath.Join(t.TempDir(), "agent")})
	if err == nil {
		require.Equal(t, int64(len(eps)), rep.Refused[verl.RefusedImages], "%+v", rep)
	} else {
		require.ErrorContains(t, err, "images in the prompt")
	}
}

// TestVLMBytesPerRequest measures what a VLM run sends: bytes per request
// and per episode of web-form with observe=both and max_images 1, 3 and
// unlimited (docs/policies.md has the table).
func TestVLMBytesPerRequest(t *testing.T) {
	needChromium(t)
	type row struct {
		max              string
		requests         int
		first, last, sum int
		maxReq           int
	}
	var rows []row
	for _, limit := range []string{"1", "3", "0"} {
		s := startVLMServer(t, 0)
		dir := t.TempDir()
		data, err := os.ReadFile("../examples/tasks/web/web-form.yaml")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "web-form.yaml"), data, 0o644))
		opts := map[string]string{"observe": "both"}
		if limit != "0" {
			opts["max_images"] = limit
		}
		vlmRun(t, s, dir, opts)
		reqs := s.requests()
		r := row{max: limit, requests: len(reqs)}
		sort.Slice(reqs, func(i, j int) bool { return reqs[i].turn < reqs[j].turn })
		for _, q := range reqs {
			r.sum += q.bytes
			r.maxReq = max(r.maxReq, q.bytes)
		}
		r.first, r.last = reqs[0].bytes, reqs[len(reqs)-1].bytes
		rows = append(rows, r)
	}
	t.Logf("| max_images | requests | first request | last request | largest request | episode total |")
	t.Logf("|---|---|---|---|---|---|")
	for _, r := range rows {
		name := r.max
		if name == "0" {
			name = "unlimited"
		}
		t.Logf("| %s | %d | %d | %d | %d | %d |", name, r.requests, r.first, r.last, r.maxReq, r.sum)
	}
	require.Less(t, rows[0].sum, rows[1].sum)
	require.Less(t, rows[1].sum, rows[2].sum)
}

// TestVLMExportsUnderGemma3: the VLM SFT exports of web episodes solved by
// the tree-reading model (tool_mode=text, so the conversation alternates
// user and model turns as Gemma 3's template demands; observe=both;
// max_images=3). The hf export loads as datasets loads it, reads as TRL's
// vision collator takes it (images decode, one per {"type": "image"}
// part), and renders under Gemma 3's real chat template with one
// <start_of_image> per image; the images are the stored PNGs the model was
// last sent, in order. chat-jsonl holds the same images as image_url data
// URLs, and -rows step rows carry the screenshot the model saw before
// acting.
func TestVLMExportsUnderGemma3(t *testing.T) {
	needChromium(t)
	oracle.Require(t)
	s := startVLMServer(t, 3)
	cfg := vlmRun(t, s, "../examples/tasks/web", map[string]string{"observe": "both", "max_images": "3", "tool_mode": "text",
		// One tool list for the run: text mode lists the tools in the one
		// system prompt the manifest records.
		"actions": "click,done,key,navigate,screenshot,scroll,type,wait"})
	eps, steps, rewards := readAll(t, cfg.Out)
	for id, ep := range eps {
		require.Equal(t, "done", ep.ExitReason, "%s: %s", ep.TaskID, ep.Detail)
		require.Equal(t, 1.0, *rewards[id].Value)
	}
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "hf")
	_, err := export.Run(ctx, export.Options{Inputs: []string{cfg.Out}, Target: "hf", Out: out})
	require.NoError(t, err)
	splits, err := loadertest.LoadHF(out)
	require.NoError(t, err)
	rows := splits["train"]
	require.Len(t, rows, 2)
	for _, row := range rows {
		id := row["episode_id"].(string)
		// screenshots stays one entry per step, each the step's own (the
		// audit's bug: 7 steps gave 6 images).
		perStep := row["screenshots"].([]any)
		require.Len(t, perStep, len(steps[id]))
		for i, shot := range perStep {
			if steps[id][i].ScreenHash == "" {
				require.Nil(t, shot, "step %d took none", i)
				continue
			}
			sum := sha256.Sum256(shot.(map[string]any)["bytes"].([]byte))
			require.Equal(t, steps[id][i].ScreenHash, hex.EncodeToString(sum[:]), "step %d", i)
		}
		ex, err := loadertest.TRLVision(row)
		require.NoError(t, err)
		// The images are what the last request carried: the stored PNGs
		// named by the last step's prompt_images.
		last := steps[id][len(steps[id])-1]
		require.Len(t, ex.Images, len(last.PromptImages))
		require.Len(t, ex.Images, 3, "max_images=3 of more screenshots")
		for i, png := range ex.Images {
			sum := sha256.Sum256(png)
			require.Equal(t, last.PromptImages[i], hex.EncodeToString(sum[:]), "image %d", i)
		}
		text, err := oracle.Render(ctx, "gemma3", oracle.RenderRequest{Messages: ex.Messages})
		require.NoError(t, err)
		require.Equal(t, len(ex.Images), strings.Count(text, "<start_of_image>"), "one image token per image under the real template")
		require.Contains(t, text, "[forkline: an earlier 800x600 screenshot, no longer shown (only the last 3 are kept)]")
		// The first image of the rendered text sits in the turn that had it.
		require.Less(t, strings.Index(text, "<start_of_image>"), strings.LastIndex(text, "<start_of_turn>model"))
	}

	jsonl := filepath.Join(t.TempDir(), "chat")
	_, err = export.Run(ctx, export.Options{Inputs: []string{cfg.Out}, Target: "chat-jsonl", Out: jsonl})
	require.NoError(t, err)
	lines, err := loadertest.LoadJSONL(filepath.Join(jsonl, "train.jsonl"))
	require.NoError(t, err)
	require.Len(t, lines, 2)
	for _, l := range lines {
		var msgs []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		require.NoError(t, json.Unmarshal(l["messages"], &msgs))
		images := 0
		for _, m := range msgs {
			var parts []struct {
				Type     string `json:"type"`
				ImageURL *struct {
					URL string `json:"url"`
				} `json:"image_url"`
			}
			if json.Unmarshal(m.Content, &parts) != nil {
				continue
			}
			for _, p := range parts {
				if p.Type == "image_url" {
					require.Equal(t, "user", m.Role, "OpenAI takes images in user messages")
					raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(p.ImageURL.URL, "data:image/png;base64,"))
					require.NoError(t, err)
					_, err = png.Decode(bytes.NewReader(raw))
					require.NoError(t, err)
					images++
				}
			}
		}
		require.Equal(t, 3, images)
	}

	verlOut := filepath.Join(t.TempDir(), "verl")
	_, err = export.Run(ctx, export.Options{Inputs: []string{cfg.Out}, Target: "verl-sft", Out: verlOut})
	require.NoError(t, err)
	verlRows, err := loadertest.LoadParquetFile(filepath.Join(verlOut, "train.parquet"))
	require.NoError(t, err)
	require.Len(t, verlRows, 2)
	for _, row := range verlRows {
		ex, err := loadertest.VerlSFTVision(row)
		require.NoError(t, err)
		require.Len(t, ex.Images, 3)
		text, err := oracle.Render(ctx, "gemma3", oracle.RenderRequest{Messages: ex.Messages})
		require.NoError(t, err)
		require.Equal(t, 3, strings.Count(text, "<start_of_image>"), "verl's split placeholders render one image token each")
	}

	stepOut := filepath.Join(t.TempDir(), "steps")
	_, err = export.Run(ctx, export.Options{Inputs: []string{cfg.Out}, Target: "hf", Rows: "step", Out: stepOut})
	require.NoError(t, err)
	stepSplits, err := loadertest.LoadHF(stepOut)
	require.NoError(t, err)
	for _, row := range stepSplits["train"] {
		id, i := row["episode_id"].(string), int(row["step_index"].(int64))
		ep := eps[id]
		require.NotEmpty(t, row["instruction"])
		before, _ := row["screenshot_before"].(map[string]any)
		require.NotNil(t, before, "step %d of %s", i, ep.TaskID)
		sum := sha256.Sum256(before["bytes"].([]byte))
		want := *ep.StartScreenHash
		for j := i - 1; j >= 0; j-- {
			if h := steps[id][j].ScreenHash; h != "" {
				want = h
				break
			}
		}
		require.Equal(t, want, hex.EncodeToString(sum[:]), "step %d sees the screenshot before it", i)
	}
}
