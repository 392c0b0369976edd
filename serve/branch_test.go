package serve_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/replay"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/serve"
	"github.com/forkline/forkline/serve/openenvtest"
	"github.com/forkline/forkline/task"
)

// chooseTask rewards an answer.txt that says yes: what a branch writes
// decides its reward.
const chooseTask = `id: choose
instruction: Write yes into answer.txt.
files:
  answer.txt: "unset\n"
limits: {max_steps: 10}
verify: {cmd: 'test "$(cat answer.txt)" = yes', reward: exit}
`

// checkpoints counts the local provider's live checkpoints in work
// (goldens included).
func checkpoints(t *testing.T, work string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(work, "forkline-local-*", "cp-*"))
	require.NoError(t, err)
	return len(m)
}

// extension is the branching extension as /extensions and /metadata
// advertise it, its message schemas compiled by an independent validator.
type extension struct {
	serverMsg map[string]*jsonschema.Schema
}

func fetchExtension(t *testing.T, base string, available bool) extension {
	t.Helper()
	status, body, err := openenvtest.HTTPJSON("GET", base+"/metadata", nil)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	if available {
		require.Contains(t, body["description"], serve.BranchingExtension)
	} else {
		require.NotContains(t, body["description"], serve.BranchingExtension, "a server that cannot branch does not advertise it")
	}
	status, body, err = openenvtest.HTTPJSON("GET", base+"/extensions", nil)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	b := body[serve.BranchingExtension].(map[string]any)
	require.Equal(t, available, b["available"])
	require.Equal(t, "from_checkpoint", b["reset_key"])
	ext := extension{serverMsg: map[string]*jsonschema.Schema{}}
	c := jsonschema.NewCompiler()
	for side, msgs := range b["schemas"].(map[string]any) {
		if side != "client" && side != "server" {
			continue
		}
		for name, s := range msgs.(map[string]any) {
			url := "mem://" + side + "/" + name
			require.NoError(t, c.AddResource(url, s))
			compiled, err := c.Compile(url)
			require.NoError(t, err, "the %s %s schema is not a valid JSON Schema", side, name)
			if side == "server" {
				ext.serverMsg[name] = compiled
			}
		}
	}
	require.Contains(t, ext.serverMsg, "checkpoint")
	return ext
}

// Without forks (-reset recreate) there is nothing to checkpoint: the
// message is refused, and the extension is not advertised as available.
func TestCheckpointRefusedWhenTheServerRecreates(t *testing.T) {
	ts := startServer(t, serve.Config{Tasks: writeTask(t, chooseTask), Reset: pool.Recreate})
	fetchExtension(t, ts.base, false)
	c, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	defer c.Disconnect()
	_, err = c.Reset(nil)
	require.NoError(t, err)
	_, err = c.Step(execAction("true"))
	require.NoError(t, err)
	_, err = checkpointMsg(c)
	requireCode(t, err, "EXECUTION_ERROR", "cannot checkpoint")
	r, err := c.Step(map[string]any{"kind": "done"})
	require.NoError(t, err)
	require.True(t, r.Done, "the refused checkpoint left the episode as it was")
}

func checkpointMsg(c *openenvtest.Client) (map[string]any, error) {
	resp, err := c.SendAndReceive(map[string]any{"type": "checkpoint"})
	if err != nil {
		return nil, err
	}
	if resp["type"] != "checkpoint" {
		return nil, fmt.Errorf("checkpoint answered %v", resp["type"])
	}
	data, _ := resp["data"].(map[string]any)
	return data, nil
}

func releaseMsg(c *openenvtest.Client, id string) error {
	resp, err := c.SendAndReceive(map[string]any{"type": "release", "data": map[string]any{"checkpoint_id": id}})
	if err == nil && resp["type"] != "released" {
		err = fmt.Errorf("release answered %v", resp["type"])
	}
	return err
}

func execAction(cmd string) map[string]any { return map[string]any{"kind": "exec", "cmd": cmd} }

// A session checkpoints its episode at step 2 and goes on; three sessions
// reset from the checkpoint and step to done with rewards of their own,
// before the parent ends. Each branch starts with the parent's files at the
// checkpoint (not what the parent did after it) and its observation; the
// recorded dataset verifies, every branch's trajectory is the parent's two
// steps and then its own, its lineage columns are collect's, and it
// replays; a bad checkpoint id is refused with a clear code; closing the
// owner releases the checkpoint; the drain leaves no sandbox or
// checkpoint.
func TestBranchesOverTheWire(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: writeTask(t, chooseTask), Out: out, SessionCheckpoints: 2})
	sch := fetchSchemas(t, ts.base)
	ext := fetchExtension(t, ts.base, true)

	p, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	_, err = p.Reset(map[string]any{"episode_id": "parent"})
	require.NoError(t, err)
	_, err = checkpointMsg(p)
	requireCode(t, err, "EXECUTION_ERROR", "no step of its own")
	parentActions := []map[string]any{execAction("echo no > answer.txt"), execAction("echo k >> log.txt && cat log.txt")}
	var last map[string]any
	for _, a := range parentActions {
		r, err := p.Step(a)
		require.NoError(t, err)
		last = r.Observation
	}
	goldens := checkpoints(t, ts.work)
	resp, err := p.SendAndReceive(map[string]any{"type": "checkpoint"})
	require.NoError(t, err)
	require.NoError(t, ext.serverMsg["checkpoint"].Validate(resp), "the checkpoint answer against /extensions")
	cp := resp["data"].(map[string]any)
	require.Equal(t, "parent", cp["episode_id"])
	require.Equal(t, "choose", cp["task_id"])
	require.Equal(t, 2.0, cp["step"])
	id := cp["checkpoint_id"].(string)
	again, err := checkpointMsg(p)
	require.NoError(t, err)
	require.Equal(t, id, again["checkpoint_id"], "a second checkpoint at the same step is the first")
	require.Equal(t, goldens+1, checkpoints(t, ts.work))

	// The parent goes on after its checkpoint; what it writes now is not
	// the branches'.
	r, err := p.Step(execAction("echo maybe > answer.txt"))
	require.NoError(t, err)
	require.False(t, r.Done)
	st, err := p.State()
	require.NoError(t, err)
	require.Equal(t, []any{id}, st["checkpoints"])

	// A session holds at most -session-checkpoints (2 here).
	cp3, err := checkpointMsg(p)
	require.NoError(t, err)
	require.Equal(t, 3.0, cp3["step"])
	_, err = p.Step(execAction("true"))
	require.NoError(t, err)
	_, err = checkpointMsg(p)
	requireCode(t, err, "CHECKPOINT_LIMIT", "(the server allows 2 a session)")
	require.NoError(t, releaseMsg(p, cp3["checkpoint_id"].(string)))
	requireCode(t, releaseMsg(p, cp3["checkpoint_id"].(string)), "CHECKPOINT_NOT_FOUND", "released already")

	// Bad input is refused by code and changes nothing.
	other, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	_, err = other.Reset(map[string]any{"from_checkpoint": "cp-nope"})
	requireCode(t, err, "CHECKPOINT_NOT_FOUND", `no checkpoint "cp-nope"`)
	_, err = other.Reset(map[string]any{"from_checkpoint": cp3["checkpoint_id"]})
	requireCode(t, err, "CHECKPOINT_NOT_FOUND", "released")
	_, err = other.Reset(map[string]any{"from_checkpoint": id, "task_id": "choose"})
	requireCode(t, err, "VALIDATION_ERROR", "task_id and seed do not go with it")
	requireCode(t, releaseMsg(other, id), "VALIDATION_ERROR", "belongs to another session")
	requireCode(t, releaseMsg(other, "cp-nope"), "CHECKPOINT_NOT_FOUND", "no checkpoint cp-nope")
	st, err = other.State()
	require.NoError(t, err)
	require.Nil(t, st["episode_id"], "the refused resets began nothing")
	other.Disconnect()

	// Three branches, concurrently, each its own way to done.
	plans := [][]map[string]any{
		{{"kind": "read_file", "path": "answer.txt"}, execAction("echo yes > answer.txt"), {"kind": "done"}},
		{{"kind": "done"}},
		{execAction("echo yes > answer.txt"), {"kind": "done"}},
	}
	wantReward := []float64{1, 0, 1}
	type branch struct {
		id      string
		index   int
		sent    []map[string]any
		outputs []any
		reward  *float64
	}
	branches := make([]branch, len(plans))
	var wg sync.WaitGroup
	errs := make(chan error, len(plans))
	for i, plan := range plans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := openenvtest.Dial(ts.base)
			if err != nil {
				errs <- err
				return
			}
			defer c.Disconnect()
			r, err := c.Reset(map[string]any{"from_checkpoint": id})
			if err != nil {
				errs <- err
				return
			}
			o := r.Observation
			if o["parent_episode_id"] != "parent" || o["step"] != 2.0 || o["output"] != last["output"] || o["text"] != last["text"] ||
				o["group_id"] != episode.BranchGroupID("parent", 2) || r.Done {
				errs <- fmt.Errorf("branch reset observation: %v (the parent's last: %v)", o, last)
				return
			}
			if err := sch.observation.Validate(o); err != nil {
				errs <- fmt.Errorf("branch reset observation against /schema: %w", err)
				return
			}
			b := branch{id: o["episode_id"].(string), index: int(o["branch_index"].(float64))}
			for _, a := range plan {
				r, err := c.Step(a)
				if err != nil {
					errs <- err
					return
				}
				b.sent, b.outputs = append(b.sent, a), append(b.outputs, r.Observation["output"])
				if r.Done {
					b.reward = r.Reward
				}
			}
			branches[i] = b
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	sort.Slice(branches, func(a, b int) bool { return branches[a].index < branches[b].index })
	byPlan := map[string]branch{}
	for i, b := range branches {
		require.Equal(t, i, b.index, "the branches are indexed 0..n-1")
		require.Equal(t, episode.BranchID("parent", 2, i), b.id, "the branch id is collect's")
		byPlan[fmt.Sprint(b.sent)] = b
	}
	for i, plan := range plans {
		b, ok := byPlan[fmt.Sprint(plan)]
		require.True(t, ok)
		require.NotNil(t, b.reward)
		require.Equal(t, wantReward[i], *b.reward, "plan %d", i)
	}
	require.Equal(t, "no\n", byPlan[fmt.Sprint(plans[0])].outputs[0], "a branch sees the files at the checkpoint, not the parent's later ones")

	// The parent ends after its branches: they were held until it was
	// recorded.
	r, err = p.Step(map[string]any{"kind": "done"})
	require.NoError(t, err)
	require.True(t, r.Done)
	require.Equal(t, 0.0, *r.Reward, "the parent's own answer (maybe)")
	require.Eventually(t, func() bool { return checkpoints(t, ts.work) == goldens+1 }, 30*time.Second, 10*time.Millisecond,
		"the live checkpoint outlives the parent's episode (it is its session's), the released one goes with the parent's sandbox: %d", checkpoints(t, ts.work))

	// Closing the owner session releases its checkpoint.
	p.Disconnect()
	require.Eventually(t, func() bool { return checkpoints(t, ts.work) == goldens }, 30*time.Second, 10*time.Millisecond,
		"the closed session's checkpoint is left: %d of %d", checkpoints(t, ts.work), goldens)
	late, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	_, err = late.Reset(map[string]any{"from_checkpoint": id})
	requireCode(t, err, "CHECKPOINT_NOT_FOUND", "released, or its session closed")
	late.Disconnect()

	sum := ts.stop(t)
	require.Equal(t, 2, sum.Checkpoints)
	require.Equal(t, 3, sum.BranchResets)
	left, err := os.ReadDir(ts.work)
	require.NoError(t, err)
	require.Empty(t, left, "the stopped server left sandboxes or checkpoints behind")

	rep, err := shard.Verify(out)
	require.NoError(t, err)
	require.True(t, rep.OK(), "forkline verify: %v", rep.Problems)
	ds, err := shard.Open(out)
	require.NoError(t, err)
	spec, err := task.Load(writeTask(t, chooseTask))
	require.NoError(t, err)
	sp := spec[0].WithDefaults()
	got := map[string][]string{}
	err = ds.EachTrajectory(func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
		var actions []string
		for _, s := range steps {
			actions = append(actions, s.ActionJSON)
		}
		got[ep.EpisodeID] = actions
		if ep.EpisodeID == "parent" {
			require.Equal(t, "done", ep.ExitReason, "the parent is a trajectory of its own")
			require.Nil(t, ep.ParentEpisodeID)
			require.Equal(t, episode.RootGroupID(sp.ID, sp.Hash()), *ep.GroupID)
			return nil
		}
		b := branches[*ep.BranchIndex]
		require.Equal(t, b.id, ep.EpisodeID)
		require.Equal(t, "parent", *ep.ParentEpisodeID)
		require.Equal(t, int32(2), *ep.BranchStep)
		require.Equal(t, episode.BranchGroupID("parent", 2), *ep.GroupID)
		require.Equal(t, int32(len(b.sent)), ep.Steps, "a branch stores only its own steps")
		require.Len(t, rewards, 1)
		require.Equal(t, *b.reward, *rewards[0].Value)
		return nil
	})
	require.NoError(t, err)
	actionJSON := func(as []map[string]any) []string {
		var out []string
		for _, a := range as {
			b, _ := json.Marshal(a)
			var m map[string]any
			json.Unmarshal(b, &m)
			out = append(out, canonicalJSON(t, m))
		}
		return out
	}
	require.Len(t, got, 4, "the parent and its three branches")
	require.Len(t, got["parent"], 5)
	for _, b := range branches {
		want := append(actionJSON(parentActions), actionJSON(b.sent)...)
		var have []string
		for _, a := range got[b.id] {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(a), &m))
			have = append(have, canonicalJSON(t, m))
		}
		require.Equal(t, want, have, "branch %d: the parent's two steps, then its own", b.index)
	}

	replayed, err := replay.Run(context.Background(), replay.Config{In: out, WorkDir: t.TempDir(), Replicas: 2})
	require.NoError(t, err)
	require.Equal(t, 4, replayed.Identical, "replay: %d identical, %d diverged, %d errored", replayed.Identical, replayed.Diverged, replayed.Errored)
}

// canonicalJSON is v as JSON with sorted keys, to compare actions as sent
// with actions as stored.
func canonicalJSON(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// branchTreeAndDrain plays a tree of depth two — root checkpointed after
// its step 1, branch b checkpointed after step 2, c (done) and d (running)
// branched from b — and stops the server while root, b and d are still
// running: c ended before its parents and waited for them to be recorded;
// the drain ends everything as cancelled, releases both checkpoints, and
// the dataset verifies with every trajectory joined across the continued
// parents. leftovers lists what the provider still holds.
func branchTreeAndDrain(t *testing.T, cfg serve.Config, rootID string, leftovers func(work string) []string) {
	out := filepath.Join(t.TempDir(), "served")
	if cfg.Tasks == "" {
		cfg.Tasks = writeTask(t, chooseTask)
	}
	cfg.Out = out
	ts := startServer(t, cfg)
	dial := func() *openenvtest.Client {
		c, err := openenvtest.Dial(ts.base)
		require.NoError(t, err)
		return c
	}
	root, b, c, d := dial(), dial(), dial(), dial()
	_, err := root.Reset(map[string]any{"episode_id": rootID})
	require.NoError(t, err)
	_, err = root.Step(execAction("echo a > answer.txt"))
	require.NoError(t, err)
	cpA, err := checkpointMsg(root)
	require.NoError(t, err)

	r, err := b.Reset(map[string]any{"from_checkpoint": cpA["checkpoint_id"]})
	require.NoError(t, err)
	bID := r.Observation["episode_id"].(string)
	require.Equal(t, episode.BranchID(rootID, 1, 0), bID)
	_, err = b.Step(execAction("echo yes > answer.txt"))
	require.NoError(t, err)
	cpB, err := checkpointMsg(b)
	require.NoError(t, err)
	require.Equal(t, 2.0, cpB["step"], "a branch's step count includes what it inherits")

	r, err = c.Reset(map[string]any{"from_checkpoint": cpB["checkpoint_id"], "episode_id": "c-" + rootID})
	require.NoError(t, err)
	require.Equal(t, bID, r.Observation["parent_episode_id"])
	require.Equal(t, 0.0, r.Observation["branch_index"])
	r, err = c.Step(map[string]any{"kind": "done"})
	require.NoError(t, err)
	require.Equal(t, 1.0, *r.Reward, "b's answer, forked")
	c.Disconnect()

	r, err = d.Reset(map[string]any{"from_checkpoint": cpB["checkpoint_id"]})
	require.NoError(t, err)
	dID := r.Observation["episode_id"].(string)
	require.Equal(t, episode.BranchID(bID, 2, 1), dID, "the index counts on after the named branch")
	_, err = d.Step(execAction("echo no > answer.txt"))
	require.NoError(t, err)
	st, err := d.State()
	require.NoError(t, err)
	require.Equal(t, 3.0, st["step_count"])

	sum := ts.stop(t)
	// The open clients must live until the drain: one collected earlier
	// closes its socket, and its session (and checkpoint) would end then.
	runtime.KeepAlive([]*openenvtest.Client{root, b, d})
	require.Equal(t, 2, sum.Checkpoints)
	require.Equal(t, 3, sum.Episodes["cancelled"], "root, b and d were stopped by the drain")
	require.Empty(t, leftovers(ts.work), "the drained server left sandboxes or checkpoints behind")

	rep, err := shard.Verify(out)
	require.NoError(t, err)
	require.True(t, rep.OK(), "forkline verify: %v", rep.Problems)
	ds, err := shard.Open(out)
	require.NoError(t, err)
	// c ended first but was committed after its parents: a crash can
	// never leave a branch without the prefix it continues.
	order := map[string]int{}
	for ep, err := range ds.Episodes() {
		require.NoError(t, err)
		order[ep.EpisodeID] = len(order)
	}
	require.Less(t, order[rootID], order[bID])
	require.Less(t, order[bID], order["c-"+rootID])
	require.Less(t, order[bID], order[dID])
	got := map[string][]string{}
	require.NoError(t, ds.EachTrajectory(func(ep schemas.EpisodeRow, steps []schemas.StepRow, _ []schemas.RewardRow) error {
		for _, s := range steps {
			got[ep.EpisodeID] = append(got[ep.EpisodeID], s.ActionJSON)
		}
		return nil
	}))
	a, yes, no, done := `{"kind":"exec","cmd":"echo a \u003e answer.txt"}`, `{"kind":"exec","cmd":"echo yes \u003e answer.txt"}`,
		`{"kind":"exec","cmd":"echo no \u003e answer.txt"}`, `{"kind":"done"}`
	norm := func(in []string) []string {
		var out []string
		for _, s := range in {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(s), &m))
			out = append(out, canonicalJSON(t, m))
		}
		return out
	}
	for id, want := range map[string][]string{rootID: {a}, bID: {a, yes}, "c-" + rootID: {a, yes, done}, dID: {a, yes, no}} {
		require.Equal(t, norm(want), norm(got[id]), "trajectory of %s", id)
	}
	require.Len(t, got, 4)
}

func TestBranchTreeAndDrainOnLocal(t *testing.T) {
	branchTreeAndDrain(t, serve.Config{}, "root", func(work string) []string {
		left, _ := filepath.Glob(filepath.Join(work, "*"))
		return left
	})
}

// On Docker a checkpoint is a committed image: the drain removes every
// container and image the tree made.
func TestBranchTreeAndDrainOnDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers")
	}
	requireDocker(t)
	var b [4]byte
	rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	id, rootID := "choose-"+suffix, "root-"+suffix
	spec := writeTask(t, strings.Replace(chooseTask, "id: choose", "id: "+id, 1))
	specs, err := task.Load(spec)
	require.NoError(t, err)
	key := id + "@" + specs[0].Hash()[:12]
	branchTreeAndDrain(t, serve.Config{Tasks: spec, Provider: "docker", ProviderParams: map[string]string{"image": "forkline/busybox"}}, rootID,
		func(string) []string {
			left := dockerObjects(t, id, key)
			for _, ep := range []string{rootID, episode.BranchID(rootID, 1, 0)} {
				out, err := exec.Command("docker", "images", "-q", "--filter", "label=forkline.checkpoint.label=serve "+ep).Output()
				require.NoError(t, err)
				left = append(left, strings.Fields(string(out))...)
			}
			return left
		})
}

// -max-checkpoints bounds the checkpoints live on the server, whichever
// sessions hold them; a release makes room.
func TestServerWideCheckpointBound(t *testing.T) {
	ts := startServer(t, serve.Config{Tasks: writeTask(t, chooseTask), MaxCheckpoints: 1})
	var cs [2]*openenvtest.Client
	for i := range cs {
		c, err := openenvtest.Dial(ts.base)
		require.NoError(t, err)
		defer c.Disconnect()
		_, err = c.Reset(nil)
		require.NoError(t, err)
		_, err = c.Step(execAction("echo x > answer.txt"))
		require.NoError(t, err)
		cs[i] = c
	}
	cp, err := checkpointMsg(cs[0])
	require.NoError(t, err)
	_, err = checkpointMsg(cs[1])
	requireCode(t, err, "CHECKPOINT_LIMIT", "live on the server (its limit)")
	require.NoError(t, releaseMsg(cs[0], cp["checkpoint_id"].(string)))
	_, err = checkpointMsg(cs[1])
	require.NoError(t, err, "the release made room")
}

// A branch's token record opens with its parent's ids exactly: the
// parent's model turns before the checkpoint are the branch's prefix, as
// in collect.
func TestBranchTokenRecordOpensWithTheParentsIDs(t *testing.T) {
	out := filepath.Join(t.TempDir(), "served")
	ts := startServer(t, serve.Config{Tasks: writeTask(t, chooseTask), Out: out})
	p, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	_, err = p.Reset(map[string]any{"episode_id": "tok-parent"})
	require.NoError(t, err)
	_, err = p.Step(map[string]any{"kind": "exec", "cmd": "cat answer.txt", "metadata": map[string]any{
		"prompt_ids": []int{10, 11, 12}, "response_ids": []int{13, 14}, "logprobs": []float64{-0.25, -1.5}}})
	require.NoError(t, err)
	cp, err := checkpointMsg(p)
	require.NoError(t, err)
	_, err = p.Step(map[string]any{"kind": "done", "metadata": map[string]any{
		"prompt_ids": []int{10, 11, 12, 13, 14, 20, 21}, "response_ids": []int{16}, "logprobs": []float64{-0.75}}})
	require.NoError(t, err)

	b, err := openenvtest.Dial(ts.base)
	require.NoError(t, err)
	r, err := b.Reset(map[string]any{"from_checkpoint": cp["checkpoint_id"]})
	require.NoError(t, err)
	branchID := r.Observation["episode_id"].(string)
	_, err = b.Step(map[string]any{"kind": "done", "metadata": map[string]any{
		"prompt_ids": []int{10, 11, 12, 13, 14, 20, 21}, "response_ids": []int{15}, "logprobs": []float64{-0.5}}})
	require.NoError(t, err)
	p.Disconnect()
	b.Disconnect()
	ts.stop(t)

	ds, err := shard.Open(out)
	require.NoError(t, err)
	eps := map[string]schemas.EpisodeRow{}
	for ep, err := range ds.Episodes() {
		require.NoError(t, err)
		eps[ep.EpisodeID] = ep
	}
	par, br := eps["tok-parent"], eps[branchID]
	require.False(t, br.TokenDrift)
	require.Equal(t, int32(2), br.TokenTurns)
	require.Equal(t, par.PromptIDs, br.PromptIDs, "prompt ids equal")
	require.Equal(t, []int32{13, 14, 20, 21, 15}, br.ResponseIDs)
	require.Equal(t, []int32{13, 14, 20, 21, 16}, par.ResponseIDs)
	require.Equal(t, par.ResponseIDs[:4], br.ResponseIDs[:4], "the parent's ids before the checkpoint open the branch's")
	require.Equal(t, []int32{1, 1, 0, 0, 1}, br.ResponseMask)
	require.Equal(t, []float32{-0.25, -1.5, 0, 0, -0.5}, br.ResponseLogprobs)
}
