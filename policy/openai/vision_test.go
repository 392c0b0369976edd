package openai

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/internal/oracle"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/policy/openai/openaitest"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/tokens"
)

// screenshot is a small PNG of one colour.
func screenshot(t *testing.T, shade uint8) *runtime.Screenshot {
	img := image.NewRGBA(image.Rect(0, 0, 8, 6))
	for y := range 6 {
		for x := range 8 {
			img.Set(x, y, color.RGBA{shade, 0, 0, 255})
		}
	}
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	return &runtime.Screenshot{PNG: b.Bytes(), Width: 8, Height: 6}
}

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestImagesInTheConversation: observe=both sends the start page with the
// instruction and each screenshot as an image_url part (in a user message
// after the tool result), keeps only the last max_images as images with a
// note for the older ones, and records which images each prompt carried.
func TestImagesInTheConversation(t *testing.T) {
	srv := openaitest.Start(t, openaitest.Options{Model: func(r openaitest.Request) (openaitest.Turn, error) {
		return openaitest.Turn{ToolCalls: []openaitest.ToolCall{call(fmt.Sprintf("c%d", r.Turn), "screenshot", "{}")}}, nil
	}})
	c, err := ParseOptions(map[string]string{"base_url": srv.URL, "observe": "both", "max_images": "2", "tokens": "chat"})
	require.NoError(t, err)
	p, err := New(c)
	require.NoError(t, err)

	start := runtime.Observation{Output: []byte("url: index.html\ntitle: Sign up\n"), ExitCode: -1, Screenshot: screenshot(t, 1),
		AXTree: `{"role":"RootWebArea","name":"Sign up","children":[{"role":"button","name":"Go","bounds":[10,20,30,40]}]}`}
	h := runtime.History{Instruction: "Sign up.", Start: &start}
	shots := []*runtime.Screenshot{start.Screenshot}
	var events []*runtime.ModelEvent
	for i := range 4 {
		d, err := p.Decide(context.Background(), h)
		require.NoError(t, err)
		events = append(events, d.Model)
		sc := screenshot(t, uint8(10+i))
		shots = append(shots, sc)
		h.Steps = append(h.Steps, runtime.Step{Index: i, Action: d.Action,
			Observation: runtime.Observation{Output: []byte("url: index.html\n"), ExitCode: -1, Screenshot: sc}})
	}
	require.Empty(t, srv.Refusals(), "what the server refused in the requests")
	reqs := srv.Received()
	require.Len(t, reqs, 4)

	// images are the sha256 of the PNGs a request carried, in order, and
	// text all its messages' text; images come in user messages only.
	images := func(r openaitest.Request) (hashes []string, text string) {
		for _, m := range r.Messages {
			text += m.Text()
			if len(m.Parts) > 0 {
				require.Equal(t, "user", m.Role)
			}
			for _, img := range m.Images() {
				require.Equal(t, [2]string{"image/png", "png"}, [2]string{img.MediaType, img.Format})
				require.Equal(t, [2]int{8, 6}, [2]int{img.Width, img.Height})
				hashes = append(hashes, img.SHA256)
			}
		}
		return hashes, text
	}
	first, text := images(reqs[0])
	require.Equal(t, []string{hashOf(start.Screenshot.PNG)}, first, "the first request shows the start page")
	require.Contains(t, text, "Sign up.\n\n[forkline: the start page]\nurl: index.html")
	require.Contains(t, text, "button \"Go\" box=10,20,30,40")
	require.Equal(t, first, events[0].PromptImages)

	last, text := images(reqs[3])
	require.Equal(t, []string{hashOf(shots[2].PNG), hashOf(shots[3].PNG)}, last, "the last 2 images stay")
	require.Equal(t, 2, strings.Count(text, aci.ImageNote(8, 6, 2)), "the 2 older ones are notes")
	require.Equal(t, last, events[3].PromptImages)
	require.NotContains(t, text, "this policy sends text only")
}

// TestVisionOptions: the observe options are checked and recorded, and
// settings that cannot work are refused by name.
func TestVisionOptions(t *testing.T) {
	base := "http://127.0.0.1:8000/v1"
	c, err := ParseOptions(map[string]string{"base_url": base, "observe": "a11y"})
	require.NoError(t, err)
	conv, err := c.Conversation()
	require.NoError(t, err)
	require.Equal(t, aci.ObserveA11y, conv.Observe)
	require.True(t, conv.TaskActions, "no actions option: each task's own")

	// By default a model reads the page: the accessibility tree as text,
	// which every model can read (text showed the url and title only, so
	// a model on a browser task saw nothing of the page); the manifest
	// records the mode.
	c, err = ParseOptions(map[string]string{"base_url": base})
	require.NoError(t, err)
	conv, err = c.Conversation()
	require.NoError(t, err)
	require.Equal(t, aci.ObserveA11y, conv.Observe, "the default observe mode")
	for name, tc := range map[string]struct {
		opts map[string]string
		want string
	}{
		"unknown mode":          {map[string]string{"observe": "pixels"}, `observe "pixels" is not known`},
		"max_images, no images": {map[string]string{"observe": "a11y", "max_images": "2"}, "max_images applies to images"},
		"max_images zero":       {map[string]string{"observe": "both", "max_images": "0"}, "must be at least 1"},
		"tito with images":      {map[string]string{"observe": "screenshot", "tokens": "tito"}, "tokens=tito sends token ids only"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.opts["base_url"] = base
			_, err := ParseOptions(tc.opts)
			require.ErrorIs(t, err, ErrOption)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestImageTokenRecordUnderGemma3: against a server with Gemma 3's real
// chat template and tokenizer whose prompts count each image as vLLM's
// Gemma 3 processor does (256 <image_soft_token> ids), the episode's token
// record assembles whole: every image placeholder of a later prompt is an
// environment token (mask 0), the record is not cut as drift, and every
// turn is in it. With max_images, an image leaving the context rewrites an
// earlier message: the record is cut there, as it must be.
func TestImageTokenRecordUnderGemma3(t *testing.T) {
	oracle.Require(t) // oracle.TokenID below runs before vllmsim.Start, which would require it too
	call := func(name, args string) vllmsim.Reply {
		return vllmsim.Reply{Text: "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>"}
	}
	run := func(t *testing.T, opts map[string]string) (tokens.Record, []*runtime.ModelEvent) {
		s := vllmsim.Start(t, vllmsim.Config{Model: "google/gemma-3-4b-it", Template: "gemma3", Tokenizer: "gemma3", StopToken: "<end_of_turn>",
			ContentFormat: vllmsim.ContentOpenAI, ImageTokens: 256,
			Respond: vllmsim.Replies(call("click", `{"x": 1, "y": 2}`), call("click", `{"x": 3, "y": 4}`), call("click", `{"x": 5, "y": 6}`), call("done", `{"answer": "ok"}`))})
		o := map[string]string{"base_url": s.URL + "/v1", "observe": "both", "tool_mode": "text", "tokens": "chat",
			"actions": "click,done"}
		for k, v := range opts {
			o[k] = v
		}
		c, err := ParseOptions(o)
		require.NoError(t, err)
		p, err := New(c)
		require.NoError(t, err)
		start := runtime.Observation{Output: []byte("url: index.html\ntitle: A\n"), ExitCode: -1, Screenshot: screenshot(t, 1)}
		h := runtime.History{Instruction: "Click three times, then say done.", Start: &start}
		var turns []tokens.Turn
		var evs []*runtime.ModelEvent
		for i := range 4 {
			d, err := p.Decide(context.Background(), h)
			require.NoError(t, err)
			require.Empty(t, d.Stop, d.Detail)
			evs = append(evs, d.Model)
			turns = append(turns, tokens.Turn{PromptIDs: d.Model.PromptIDs, ResponseIDs: d.Model.ResponseIDs, Logprobs: d.Model.Logprobs})
			h.Steps = append(h.Steps, runtime.Step{Index: i, Action: d.Action,
				Observation: runtime.Observation{Output: []byte("url: index.html\n"), ExitCode: -1, Screenshot: screenshot(t, uint8(20+i))}})
		}
		r, err := tokens.Assemble(turns)
		require.NoError(t, err)
		require.NoError(t, r.Check())
		return r, evs
	}
	ctx := context.Background()
	soft, err := oracle.TokenID(ctx, "gemma3", "<image_soft_token>")
	require.NoError(t, err)
	count := func(ids []int32) int {
		n := 0
		for _, id := range ids {
			if id == soft {
				n++
			}
		}
		return n
	}

	t.Run("every image kept", func(t *testing.T) {
		r, evs := run(t, nil)
		require.False(t, r.Drift, "image placeholders must not read as drift (cut %s)", r.Cut)
		require.Equal(t, 4, r.Turns)
		require.Equal(t, 256, count(r.PromptIDs), "the start page's image is in the first prompt")
		require.Equal(t, 3*256, count(r.ResponseIDs), "one image after each of the three clicks")
		for i, id := range r.ResponseIDs {
			if id == soft {
				require.Zero(t, r.Mask[i], "an image placeholder is an environment token")
			}
		}
		require.Len(t, evs[3].PromptImages, 4)
	})
	t.Run("max_images cuts at the first image that leaves", func(t *testing.T) {
		r, evs := run(t, map[string]string{"max_images": "2"})
		require.True(t, r.Drift)
		require.Equal(t, "drift", r.Cut)
		require.Equal(t, 2, r.Turns, "the third prompt no longer shows the start page's image")
		require.Len(t, evs[3].PromptImages, 2)
	})
}
