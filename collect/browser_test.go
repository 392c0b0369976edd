package collect

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/model/tabletest"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/internal/ui"
	"github.com/forkline/forkline/providers/browser"
	"github.com/forkline/forkline/runtime"
)

// needChromium ends the test through testenv when Chromium is not installed.
func needChromium(t testing.TB) {
	t.Helper()
	testenv.NeedChromium(t)
}

// decodePNG decodes a screenshot and checks its size and that it is not a
// blank image.
func decodePNG(t *testing.T, b []byte, w, h int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, w, h), img.Bounds())
	colors := map[[4]uint32]bool{}
	for y := 0; y < h; y += 5 {
		for x := 0; x < w; x += 5 {
			r, g, b, a := img.At(x, y).RGBA()
			colors[[4]uint32{r, g, b, a}] = true
		}
	}
	require.Greater(t, len(colors), 2, "a blank screenshot")
}

// TestCollectWebTasks is the demonstration: the example web tasks
// with 4 replicas give real screenshots and accessibility trees; with
// pixels hash the replicas' identical screenshots are stored once, every
// hash resolves, and the hf export embeds the PNG bytes.
func TestCollectWebTasks(t *testing.T) {
	needChromium(t)
	cfg := baseConfig(t, "../examples/tasks/web")
	cfg.Replicas, cfg.Repeats = 4, 2
	cfg.Capture = capture.DefaultPolicy() // pixels hash
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	rep := sum.Report()
	require.Equal(t, 4, rep.Episodes)
	require.Equal(t, 4, rep.ByExit["done"], "%+v", rep)
	require.Equal(t, 4, rep.Rewarded)
	require.Equal(t, 1.0, *rep.RewardMean)

	eps, steps, rewards := readAll(t, cfg.Out)
	ds, err := shard.Open(cfg.Out)
	require.NoError(t, err)
	var capRec map[string]string
	require.NoError(t, json.Unmarshal(ds.Manifest().Capture, &capRec))
	require.Equal(t, "hash", capRec["pixels"])

	shots := 0
	firstShot := map[string]map[string]bool{} // task → hashes of step 0
	for id, e := range eps {
		require.Equal(t, 1.0, *rewards[id].Value, rewards[id].Detail)
		require.Greater(t, e.GoldenBytes, int64(0))
		for _, s := range steps[id] {
			gui := s.ActionKind != "exec" && s.ActionKind != "done"
			require.Equal(t, gui, s.ScreenHash != "", "step %d (%s)", s.StepIndex, s.ActionKind)
			if !gui {
				continue
			}
			shots++
			require.False(t, s.IsError, s.Output)
			require.Empty(t, s.Screenshot, "pixels hash keeps no bytes in the step")
			require.EqualValues(t, 800, s.ScreenW)
			require.EqualValues(t, 600, s.ScreenH)
			b, err := ds.Blob(s.ScreenHash)
			require.NoError(t, err, "every hash resolves to its PNG")
			sum := sha256.Sum256(b)
			require.Equal(t, s.ScreenHash, hex.EncodeToString(sum[:]))
			decodePNG(t, b, 800, 600)
			require.NotEmpty(t, s.AXTree)
			if s.StepIndex == 0 {
				if firstShot[e.TaskID] == nil {
					firstShot[e.TaskID] = map[string]bool{}
				}
				firstShot[e.TaskID][s.ScreenHash] = true
			}
		}
		if e.TaskID == "web-form" {
			tree, err := browser.ParseAXTree(steps[id][0].AXTree)
			require.NoError(t, err)
			for _, want := range [][2]string{{"textbox", "Full name"}, {"textbox", "Email"}, {"radiogroup", "Plan"},
				{"radio", "Pro"}, {"checkbox", "I accept the terms"}, {"button", "Create account"}} {
				require.Len(t, tree.Find(func(n *browser.AXNode) bool { return n.Role == want[0] && n.Name == want[1] }), 1,
					"%s %q in %s", want[0], want[1], steps[id][0].AXTree)
			}
			require.Contains(t, steps[id][8].Output, "done.html?name=Ada+Lovelace&email=ada%40example.org&plan=pro&terms=yes", "the exec step sees the page file")
		}
	}
	for task, hashes := range firstShot {
		require.Len(t, hashes, 1, "%s: replicas forked from one golden see the same first screenshot", task)
	}
	blobs := 0
	for b, err := range ds.Blobs() {
		require.NoError(t, err)
		require.Equal(t, "image/png", b.Media)
		blobs++
	}
	require.EqualValues(t, shots, rep.Screenshots)
	require.EqualValues(t, blobs, rep.BlobsStored)
	require.Less(t, blobs, shots, "identical screenshots are stored once")
	require.InDelta(t, float64(shots)/float64(blobs), rep.DedupRatio, 1e-9)
	var out bytes.Buffer
	ui.WriteCollect(&out, rep, "")
	require.Contains(t, out.String(), fmt.Sprintf("screenshots: %d, blobs stored: %d (dedup ratio", shots, blobs))

	t.Run("hf export embeds the screenshots", func(t *testing.T) { checkHFImages(t, cfg.Out, ds) })
}

// checkHFImages exports the run with forkline export -to hf -rows step and checks
// that the screenshot column is an Image whose bytes are the PNGs.
func checkHFImages(t *testing.T, run string, ds *shard.Dataset) {
	bin := filepath.Join(t.TempDir(), "forkline")
	build := exec.Command("go", "build", "-o", bin, "../cmd/forkline")
	outb, err := build.CombinedOutput()
	require.NoError(t, err, "%s", outb)
	dir := filepath.Join(t.TempDir(), "hf")
	cmd := exec.Command(bin, "export", "-in", run, "-to", "hf", "-rows", "step", "-out", dir)
	outb, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", outb)
	files, err := filepath.Glob(filepath.Join(dir, "data", "*.parquet"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	withImage := 0
	for _, f := range files {
		tab, err := tabletest.ReadParquetFile(f)
		require.NoError(t, err)
		col, ok := tab.Field("screenshot")
		require.True(t, ok, "no screenshot column")
		require.Equal(t, "struct", col.Kind)
		require.Contains(t, tab.Metadata["huggingface"], `"screenshot":{"_type":"Image"}`)
		for _, row := range tab.Rows {
			img, _ := row["screenshot"].(map[string]any)
			if img == nil || img["bytes"] == nil {
				continue
			}
			b := img["bytes"].([]byte)
			want, err := ds.Blob(row["screenshot_sha256"].(string))
			require.NoError(t, err)
			require.Equal(t, want, b, "the Image column embeds the PNG bytes")
			decodePNG(t, b, 800, 600)
			withImage++
		}
	}
	require.Greater(t, withImage, 0)
}

// TestCollectWebPixelsFull keeps the PNG bytes in the step rows.
func TestCollectWebPixelsFull(t *testing.T) {
	needChromium(t)
	cfg := baseConfig(t, "../examples/tasks/web/web-filter.yaml")
	cfg.Replicas, cfg.Repeats = 2, 2
	cfg.Capture = capture.Policy{Pixels: "full", A11y: "none", Tokens: "keep"}
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	rep := sum.Report()
	require.Equal(t, 2, rep.ByExit["done"])
	require.Zero(t, rep.BlobsStored)
	require.Zero(t, rep.DedupRatio)
	_, steps, _ := readAll(t, cfg.Out)
	n := 0
	for _, ss := range steps {
		for _, s := range ss {
			if s.ScreenHash == "" {
				continue
			}
			n++
			decodePNG(t, s.Screenshot, 800, 600)
			require.Empty(t, s.AXTree, "a11y none")
		}
	}
	require.Equal(t, 12, n)
}

// TestCollectBrowserDeath: a browser killed mid-episode ends the episode
// with env_error, and the replica is replaced.
func TestCollectBrowserDeath(t *testing.T) {
	needChromium(t)
	dir := t.TempDir()
	spec := `id: web-crash
instruction: look, then watch the browser die
browser: {viewport: 640x480, start: index.html}
actions: [exec]
files:
  index.html: "<html><head><title>Doomed</title></head><body><h1>Doomed</h1></body></html>"
solution:
  - {kind: screenshot}
  - {kind: exec, cmd: 'kill -9 $(cat .browser/pid)'}
  - {kind: click, x: 10, y: 10}
  - {kind: done}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "crash.yaml"), []byte(spec), 0o644))
	cfg := baseConfig(t, filepath.Join(dir, "crash.yaml"))
	cfg.Replicas, cfg.Repeats = 2, 2
	sum, err := Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrAllLost, "every episode lost: the run says so")
	rep := sum.Report()
	require.Equal(t, "complete", rep.Status, "a lost episode is still a kept episode")
	require.Equal(t, 2, rep.ByExit["env_error"], "%+v", rep)
	require.Equal(t, 2, rep.Replacements)
	eps, steps, _ := readAll(t, cfg.Out)
	for id, e := range eps {
		require.Contains(t, e.Detail, "chromium is gone")
		require.Len(t, steps[id], 3)
		last := steps[id][2]
		require.Equal(t, "click", last.ActionKind)
		require.Equal(t, string(runtime.ErrInterrupted), last.ErrorKind)
	}
	require.Empty(t, chromiumUnder(cfg.WorkDir), "no chromium outlives its sandbox")
}

// chromiumUnder lists processes whose command line names a profile under
// dir.
func chromiumUnder(dir string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), "--user-data-dir="+dir) {
			out = append(out, e.Name())
		}
	}
	return out
}
