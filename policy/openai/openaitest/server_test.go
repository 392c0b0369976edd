package openaitest_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/forkline/forkline/policy/openai/openaitest"
)

// pngOf is a w×h PNG.
func pngOf(t *testing.T, w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(0, 0, color.RGBA{200, 10, 10, 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func post(t *testing.T, s *openaitest.Server, body string) int {
	t.Helper()
	resp, err := http.Post(s.URL+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestImagePartsAndTools: a request in the shape OpenAI documents and vLLM
// takes (a user message whose content is text and image_url parts, the
// image a base64 PNG data URL; function tools with a JSON Schema) is
// answered, and the test reads back what it carried, parsed.
func TestImagePartsAndTools(t *testing.T) {
	s := openaitest.Start(t, openaitest.Options{Model: func(r openaitest.Request) (openaitest.Turn, error) {
		return openaitest.Turn{Content: "seen"}, nil
	}})
	shot := pngOf(t, 5, 3)
	url := "data:image/png;base64," + base64.StdEncoding.EncodeToString(shot)
	body := `{"model": "m", "messages": [
		{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
		{"role": "user", "content": [
			{"type": "text", "text": "What is on the page? "},
			{"type": "image_url", "image_url": {"url": "` + url + `", "detail": "auto"}},
			{"type": "text", "text": "Click it."}]}],
	 "tools": [{"type": "function", "function": {"name": "click", "description": "Click a point.",
		"parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}},
		{"function": {"name": "done"}}]}`
	if code := post(t, s, body); code != http.StatusOK {
		t.Fatalf("status %d, refusals %v", code, s.Refusals())
	}
	reqs := s.Received()
	if len(reqs) != 1 || len(s.Refusals()) != 0 {
		t.Fatalf("received %d, refused %v", len(reqs), s.Refusals())
	}
	r := reqs[0]
	if got := r.FirstUserText(); got != "What is on the page? Click it." {
		t.Errorf("first user text %q", got)
	}
	if got := r.Messages[0].Text(); got != "Be brief." || r.Messages[0].Content != nil {
		t.Errorf("system text %q (content %v)", got, r.Messages[0].Content)
	}
	imgs := r.Images()
	sum := sha256.Sum256(shot)
	want := openaitest.Image{URL: url, Detail: "auto", MediaType: "image/png", Format: "png", Data: shot, SHA256: hex.EncodeToString(sum[:]), Width: 5, Height: 3}
	if len(imgs) != 1 || !reflect.DeepEqual(imgs[0], want) {
		t.Errorf("images %+v", imgs)
	}
	if types := []string{r.Messages[1].Parts[0].Type, r.Messages[1].Parts[1].Type, r.Messages[1].Parts[2].Type}; !reflect.DeepEqual(types, []string{"text", "image_url", "text"}) {
		t.Errorf("part types %v", types)
	}
	if !reflect.DeepEqual(r.ToolNames(), []string{"click", "done"}) {
		t.Errorf("tools %v", r.ToolNames())
	}
	click := r.Tools[0]
	if click.Description != "Click a point." || click.Parameters["required"].([]any)[0] != "x" {
		t.Errorf("click tool %+v", click)
	}
	if r.Tools[1].Parameters != nil {
		t.Errorf("done has no parameters: %+v", r.Tools[1])
	}
}

// TestRefusesWhatAServerWould: each request a vLLM-compatible server
// would refuse (or that a loopback test server must not serve, a URL to
// fetch) is answered 400 and named in Refusals; the Model never sees it.
func TestRefusesWhatAServerWould(t *testing.T) {
	s := openaitest.Start(t, openaitest.Options{Model: func(r openaitest.Request) (openaitest.Turn, error) {
		t.Errorf("the model saw a request the server should refuse: %s", r.Raw)
		return openaitest.Turn{}, nil
	}})
	png64 := base64.StdEncoding.EncodeToString(pngOf(t, 2, 2))
	user := func(parts string) string {
		return `{"messages": [{"role": "user", "content": [` + parts + `]}]}`
	}
	image := func(url string) string { return `{"type": "image_url", "image_url": {"url": "` + url + `"}}` }
	for name, tc := range map[string]struct{ body, want string }{
		"image in a tool message": {`{"messages": [{"role": "user", "content": "go"},
			{"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "shot", "arguments": "{}"}}]},
			{"role": "tool", "tool_call_id": "a", "content": [` + image("data:image/png;base64,"+png64) + `]}]}`, "an image in a tool message"},
		"image in a system message": {`{"messages": [{"role": "system", "content": [` + image("data:image/png;base64,"+png64) + `]}]}`, "an image in a system message"},
		"a URL to fetch":            {user(image("https://example.com/a.png")), "not a data URL"},
		"not base64":                {user(image("data:image/png," + png64)), "not base64"},
		"bad base64":                {user(image("data:image/png;base64,@@@")), "base64"},
		"bytes that are no image":   {user(image("data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("not a picture")))), `image (named "image/png") does not decode`},
		"no url":                    {user(`{"type": "image_url", "image_url": {}}`), "without image_url.url"},
		"unknown part":              {user(`{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}`), `unknown content part type "input_audio"`},
		"text part without text":    {user(`{"type": "text"}`), "without text"},
		"part without type":         {user(`{"text": "hi"}`), "no type"},
		"content an object":         {`{"messages": [{"role": "user", "content": {"text": "hi"}}]}`, "neither a string"},
		"tool of another type":      {`{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "custom", "custom": {"name": "x"}}]}`, `type "custom"`},
		"tool without a name":       {`{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"description": "x"}}]}`, "without function.name"},
	} {
		t.Run(name, func(t *testing.T) {
			before := len(s.Refusals())
			if code := post(t, s, tc.body); code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", code)
			}
			got := s.Refusals()
			if len(got) != before+1 || !strings.Contains(got[before], tc.want) {
				t.Fatalf("refusals %q, want one containing %q", got[before:], tc.want)
			}
		})
	}
	if n := len(s.Received()); n != 0 {
		t.Errorf("%d refused requests kept as received", n)
	}
}
