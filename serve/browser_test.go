package serve_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image/png"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/replay"
	"github.com/forkline/forkline/serve"
	"github.com/forkline/forkline/serve/openenvtest"
	"github.com/forkline/forkline/task"
)

const webTasks = "../examples/tasks/web"

// needChromium ends the test through testenv when Chromium is not installed.
func needChromium(t testing.TB) {
	t.Helper()
	testenv.NeedChromium(t)
}

// The browser example tasks over the wire: GUI actions are answered with
// the screenshot (base64 PNG of the viewport) and accessibility tree, the
// scripted solutions earn what they earn offline, and the recording (each
// screenshot once, by hash) replays identically.
func TestBrowserTasksOverTheWire(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium")
	}
	needChromium(t)
	want := scriptedRewardsOf(t, webTasks)
	specs, err := task.Load(webTasks)
	require.NoError(t, err)
	sort.Slice(specs, func(a, b int) bool { return specs[a].ID < specs[b].ID })
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: webTasks, Out: out})
	sch := fetchSchemas(t, ts.base)
	const sessions = 2
	errs := make([]error, sessions)
	shots := make([]int, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := openenvtest.Dial(ts.base)
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Disconnect()
			for _, sp := range specs {
				tr, err := playSolution(c, sch, sp, fmt.Sprintf("web-%d-%s", i, sp.ID), canonical)
				if err == nil && !sameReward(tr.reward, want[sp.ID]) {
					err = fmt.Errorf("task %s: reward %v, offline %v", sp.ID, tr.reward, want[sp.ID])
				}
				if err != nil {
					errs[i] = err
					return
				}
				for _, o := range tr.observations {
					sc, ok := o["screenshot"].(map[string]any)
					if !ok {
						continue
					}
					raw, err := base64.StdEncoding.DecodeString(sc["png_base64"].(string))
					if err != nil {
						errs[i] = err
						return
					}
					img, err := png.Decode(bytes.NewReader(raw))
					if err != nil {
						errs[i] = fmt.Errorf("the screenshot is not a PNG: %w", err)
						return
					}
					if b := img.Bounds(); float64(b.Dx()) != sc["width"] || float64(b.Dy()) != sc["height"] {
						errs[i] = fmt.Errorf("screenshot %dx%d, said %vx%v", b.Dx(), b.Dy(), sc["width"], sc["height"])
						return
					}
					if o["a11y_tree"] == "" || o["a11y_tree"] == nil {
						errs[i] = fmt.Errorf("a GUI observation without its accessibility tree")
						return
					}
					shots[i]++
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err)
		require.Positive(t, shots[i], "session %d saw no screenshot", i)
	}
	requireNoSandboxes(t, ts.work)
	ts.stop(t)
	rep, err := shard.Verify(out)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Problems)
	ds, err := shard.Open(out)
	require.NoError(t, err)
	blobs := 0
	for _, err := range ds.Blobs() {
		require.NoError(t, err)
		blobs++
	}
	require.Positive(t, blobs, "screenshots are kept once each, by hash")
	replayed, err := replay.Run(context.Background(), replay.Config{In: out, WorkDir: t.TempDir(), Replicas: 2})
	require.NoError(t, err)
	require.Equal(t, sessions*len(specs), replayed.Identical, "%d diverged, %d errored", replayed.Diverged, replayed.Errored)
}
