package serve_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/replay"
	"github.com/forkline/forkline/serve"
	"github.com/forkline/forkline/serve/openenvtest"
	"github.com/forkline/forkline/task"
)

func requireDocker(t *testing.T) {
	t.Helper()
	testenv.NeedDocker(t)
}

// dockerObjects lists the containers of task id and the checkpoint images
// of its template key, as the engine has them.
func dockerObjects(t *testing.T, id, key string) []string {
	t.Helper()
	var all []string
	for _, args := range [][]string{
		{"ps", "-aq", "--filter", "label=forkline.task=" + id},
		{"images", "-q", "--filter", "label=forkline.checkpoint.label=" + key},
	} {
		out, err := exec.Command("docker", args...).Output()
		require.NoError(t, err)
		all = append(all, strings.Fields(string(out))...)
	}
	return all
}

// On Docker: concurrent sessions fork containers from the committed golden
// image, earn the scripted rewards, and leave no container after the
// clients go (one of them dropping its connection) nor any container or
// image after the server stops; the recording replays identically on
// Docker.
func TestDockerSessionsLeaveNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	requireDocker(t)
	data, err := os.ReadFile(filepath.Join(exampleTasks, "fix-sum.yaml"))
	require.NoError(t, err)
	var b [4]byte
	rand.Read(b[:])
	id := "fix-sum-serve-" + hex.EncodeToString(b[:])
	spec := writeTask(t, strings.Replace(string(data), "id: fix-sum", "id: "+id, 1))
	specs, err := task.Load(spec)
	require.NoError(t, err)
	key := id + "@" + specs[0].Hash()[:12]
	want := scriptedRewards(t)["fix-sum"]

	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: spec, Provider: "docker", ProviderParams: map[string]string{"image": "forkline/busybox"}, Out: out})
	sch := fetchSchemas(t, ts.base)
	const sessions = 6
	errs := make([]error, sessions)
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
			tr, err := playSolution(c, sch, specs[0], fmt.Sprintf("docker-%d", i), canonical)
			if err == nil && !sameReward(tr.reward, want) {
				err = fmt.Errorf("reward %v, the scripted solution earns %v", tr.reward, want)
			}
			errs[i] = err
			c.Disconnect()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	_, err = c.Reset(map[string]any{"episode_id": "docker-dropped"})
	require.NoError(t, err)
	_, err = c.Step(map[string]any{"kind": "exec", "cmd": "sh test.sh"})
	require.NoError(t, err)
	c.Drop()
	require.Eventually(t, func() bool { return len(dockerObjects(t, id, key)) == 1 }, time.Minute, 50*time.Millisecond,
		"after the clients went, only the golden image is left: %v", dockerObjects(t, id, key))

	ts.stop(t)
	require.Empty(t, dockerObjects(t, id, key), "the stopped server left containers or images")
	rep, err := shard.Verify(out)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Problems)
	exits, _ := recorded(t, out)
	require.Len(t, exits, sessions+1)
	require.Contains(t, exits["docker-dropped"], "cancelled: the connection dropped")
	replayed, err := replay.Run(context.Background(), replay.Config{In: out, WorkDir: t.TempDir(), Replicas: 2})
	require.NoError(t, err)
	require.Equal(t, sessions+1, replayed.Identical, "replay on docker: %d diverged, %d errored", replayed.Diverged, replayed.Errored)
	require.Empty(t, dockerObjects(t, id, key), "the replay left containers or images")
}
