package replay

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/testenv"
)

func changedSetupReport(t *testing.T) *Report {
	t.Helper()
	run := collectRun(t, "../examples/tasks/fix-sum.yaml")
	spec, err := os.ReadFile("../examples/tasks/fix-sum.yaml")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fix-sum.yaml"), []byte(changeFixSum(string(spec))), 0o644))
	rep, err := Run(context.Background(), Config{In: run, TaskFiles: dir, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Diverged)
	return rep
}

func TestRecordWritesTheReplayAsADataset(t *testing.T) {
	run := collectRun(t, "../examples/tasks")
	out := filepath.Join(t.TempDir(), "rec")
	rep, err := Run(context.Background(), Config{In: run, Record: out, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, 6, rep.Identical)

	vr, err := shard.Verify(out)
	require.NoError(t, err)
	require.True(t, vr.OK(), "%+v", vr)
	src, err := shard.Open(run)
	require.NoError(t, err)
	dst, err := shard.Open(out)
	require.NoError(t, err)
	require.Equal(t, shard.StatusComplete, dst.Manifest().Status)
	want := map[string]int32{}
	for e, err := range src.Episodes() {
		require.NoError(t, err)
		want[e.EpisodeID] = e.Steps
	}
	got := map[string]int32{}
	for e, err := range dst.Episodes() {
		require.NoError(t, err)
		got[e.EpisodeID] = e.Steps
		require.NotEqual(t, src.Manifest().RunID, e.RunID)
	}
	require.Equal(t, want, got, "the same episodes, with the same number of steps")
	// And the recording replays identically in turn.
	again, err := Run(context.Background(), Config{In: out, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, 6, again.Identical)
}

func TestHTMLReportOpensInChromium(t *testing.T) {
	chromium := testenv.NeedChromium(t)
	rep := changedSetupReport(t)
	// Give one divergence screenshots, as a browser task's would have.
	rep.Episodes[0].First.RecordedPNG = solidPNG(t, 64, 48, color.RGBA{200, 30, 30, 255})
	rep.Episodes[0].First.ReplayedPNG = solidPNG(t, 64, 48, color.RGBA{30, 30, 200, 255})
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	var buf bytes.Buffer
	require.NoError(t, WriteHTML(&buf, rep))
	require.NoError(t, os.WriteFile(page, buf.Bytes(), 0o644))
	require.NotContains(t, buf.String(), "http://", "the page is self-contained")

	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--user-data-dir=" + filepath.Join(dir, "profile")}
	dom, err := exec.Command(chromium, append(args, "--dump-dom", "file://"+page)...).Output()
	require.NoError(t, err)
	html := string(dom)
	require.Contains(t, html, `<b id="diverged">2</b>`)
	require.Equal(t, 2, strings.Count(html, `<section class="episode diverged"`))
	require.Contains(t, html, `<span class="del">- 3</span>`)
	require.Contains(t, html, `<span class="add">+ 4</span>`)
	require.Equal(t, 2, strings.Count(html, `<img class="shot `), "both screenshots of the divergent step are shown")

	shot := filepath.Join(dir, "report.png")
	out, err := exec.Command(chromium, append(args, "--screenshot="+shot, "--window-size=1200,1600", "file://"+page)...).CombinedOutput()
	require.NoError(t, err, string(out))
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Equal(t, 1200, img.Bounds().Dx())
	require.False(t, uniform(img), "the screenshot of the report is not blank")
}

func TestPixelTolerance(t *testing.T) {
	a := solidPNG(t, 100, 100, color.RGBA{255, 255, 255, 255})
	img := image.NewRGBA(image.Rect(0, 0, 100, 100))
	for y := range 100 {
		for x := range 100 {
			img.Set(x, y, color.RGBA{255, 255, 255, 255})
		}
	}
	for x := range 50 { // 50 of 10,000 pixels: 0.5%
		img.Set(x, 0, color.RGBA{0, 0, 0, 255})
	}
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	frac, err := pixelDifference(a, b.Bytes())
	require.NoError(t, err)
	require.InDelta(t, 0.005, frac, 1e-9)
	_, err = pixelDifference(a, solidPNG(t, 10, 10, color.RGBA{}))
	require.ErrorContains(t, err, "sizes differ")
}

func solidPNG(t *testing.T, w, h int, c color.RGBA) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	return b.Bytes()
}

func uniform(img image.Image) bool {
	b := img.Bounds()
	first := img.At(b.Min.X, b.Min.Y)
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			if img.At(x, y) != first {
				return false
			}
		}
	}
	return true
}

// A count of zero is not an alarm: its badge is neutral, not red (the
// errored: 0 badge was red).
func TestZeroCountsHaveNeutralBadges(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteHTML(&buf, &Report{Dataset: "d", Provider: "local", Mode: Exact, Identical: 3}))
	page := buf.String()
	require.Contains(t, page, `<span class="none">errored: <b id="errored">0</b></span>`)
	require.Contains(t, page, `<span class="none">diverged: <b id="diverged">0</b></span>`)
	buf.Reset()
	require.NoError(t, WriteHTML(&buf, &Report{Dataset: "d", Provider: "local", Mode: Exact, Errored: 1, Diverged: 2}))
	require.Contains(t, buf.String(), `<span class="error">errored: <b id="errored">1</b></span>`)
	require.Contains(t, buf.String(), `<span class="diverged">diverged: <b id="diverged">2</b></span>`)
}
