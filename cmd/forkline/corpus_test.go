package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/internal/testenv"
	"github.com/forkline/forkline/providers/gvisor"
	"github.com/forkline/forkline/serve/openenvtest"
)

// The dataset corpus: one dataset of each kind collect and serve make, each
// built once through the real binary, and every reader run over each —
// inspect (text, -json, -episode for the first episode of each exit reason
// there is), verify, every export target (each writes, or refuses with exit
// 2 and a reason: never a panic, never "damaged" for a good dataset),
// replay (identical on an unchanged environment) and merge where there are
// parts. The commands each pass their own tests on fixtures their own
// package writes; this is where they meet each other's real datasets. The
// matrix (kind × reader → result) is printed in the test log.
//
// A kind whose component is missing (the chat-template oracle, Chromium,
// Docker and its images) skips with the reason through internal/testenv,
// and fails under CI's FORKLINE_REQUIRE. The kinds' manifests are the seeds
// of the fuzz targets that read manifests (formats/shard's
// FuzzDecodeManifest, manifest's FuzzReadEntries): -update writes them
// (testdata/fuzz/*/corpus-KIND); without it the test requires one per kind
// it built, so a new kind brings its seed.

// corpusMatrixEnv names the file the matrix is written to, besides the
// test log.
const corpusMatrixEnv = "FORKLINE_CORPUS_MATRIX"

// corpusKeepEnv names an empty or new directory the corpus is built in
// and left, for comparing two builds' readers on the same datasets.
const corpusKeepEnv = "FORKLINE_CORPUS_KEEP"

// corpusKind is one kind of dataset.
type corpusKind struct {
	name string
	// build makes the dataset and returns its directory; it skips (through
	// testenv) when a component is missing.
	build func(t *testing.T, c *corpus) string
	// replay are the replay flags that make an unchanged environment's
	// replay identical (normalized for a model's ls -la, a tolerance for
	// screenshots).
	replay []string
	// parts are the datasets merged into this one, for the merge reader.
	parts func(c *corpus) []string
}

// corpus holds what the kinds are built from and into.
type corpus struct {
	root   string
	parent *testing.T // the corpus test: what outlives one kind's build
	mu     sync.Mutex
	dirs   map[string]string // kind → dataset
	// parts of the merged kind, and the script dataset -from branches.
	partDirs []string
	model    *vllmsim.Server
}

func (c *corpus) dir(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dirs[name]
}

// runBin runs forkline args as a process, with a timeout, and returns its
// exit code, stdout and stderr.
func runBin(t *testing.T, timeout time.Duration, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(forklineBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitCode(err), out.String(), errb.String()
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		t.Fatalf("forkline %s did not end within %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, tail(out.String()), tail(errb.String()))
	}
	return -1, "", ""
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// collectKind runs collect with args into a new dataset and requires it to
// complete (exit 0, or 3 when every episode is a scaffold loss by design).
func collectKind(t *testing.T, c *corpus, name string, ok []int, args ...string) string {
	t.Helper()
	out := filepath.Join(c.root, name)
	code, stdout, stderr := runBin(t, 10*time.Minute, append([]string{"collect", "-out", out, "-workdir", t.TempDir()}, args...)...)
	require.Contains(t, ok, code, "collect %s: exit %d\nstdout:\n%s\nstderr:\n%s", name, code, tail(stdout), tail(stderr))
	return out
}

var zero = []int{cli.ExitOK}

// The tasks of the script kind: the examples, and two that end otherwise
// than done — a solution longer than its step limit (max_steps), and a task
// without verify: (no reward).
const (
	corpusLongTask = `id: too-long
instruction: count to three, one step at a time
limits: {max_steps: 2}
solution:
  - {kind: exec, cmd: echo 1}
  - {kind: exec, cmd: echo 2}
  - {kind: exec, cmd: echo 3}
  - {kind: done}
verify: {cmd: "true", reward: exit}
`
	corpusUnverifiedTask = `id: unverified
instruction: write a note
solution:
  - {kind: write_file, path: note.txt, content: "hello\n"}
  - {kind: done, answer: written}
`
	// The model kinds' tasks: the model lists the files with ls -la
	// (whose dates a replay cannot reproduce), writes the count and calls
	// done; on the other task it answers without a tool call (no_action).
	corpusCountTask = `id: count
instruction: Corpus task count. Write the number of files in this directory to out.txt, then call done.
files:
  a.txt: "a\n"
  b.txt: "b\n"
verify:
  cmd: test "$(cat out.txt)" = 2
  reward: exit
limits: {max_steps: 6}
`
	corpusMuteTask = `id: mute
instruction: Corpus task mute. Say hello.
verify: {cmd: "true", reward: exit}
limits: {max_steps: 3}
`
)

func writeTasks(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	return dir
}

// modelServer is the template-exact simulator (Qwen3's real template and
// tokenizer) answering both model kinds, chat and token in, token out:
// each reply depends on the task the prompt names and on how many
// assistant turns it holds.
func (c *corpus) modelServer(t *testing.T) *vllmsim.Server {
	t.Helper()
	if c.model != nil {
		return c.model
	}
	requireOracle(t)
	// The count task's episodes alternate between a right answer (after
	// ls -la) and a wrong one (after ls -l), so that each run's group of
	// count episodes has rewards that differ and dpo finds a pair.
	var firsts atomic.Int32
	respond := func(turn vllmsim.Turn) (vllmsim.Reply, error) {
		i := strings.Count(turn.Prompt, "<|im_start|>assistant") - 1
		if strings.Contains(turn.Prompt, "Corpus task mute") {
			return vllmsim.Reply{Text: "Hello! I have nothing to run."}, nil
		}
		if !strings.Contains(turn.Prompt, "Corpus task count") {
			return vllmsim.Reply{}, fmt.Errorf("corpus: no scripted reply for %.80q", turn.Prompt)
		}
		right := strings.Contains(turn.Prompt, `"ls -la"`)
		switch i {
		case 0:
			if firsts.Add(1)%2 == 1 {
				return vllmsim.Reply{Text: call("exec", `{"cmd": "ls -la"}`)}, nil
			}
			return vllmsim.Reply{Text: call("exec", `{"cmd": "ls -l"}`)}, nil
		case 1:
			if right {
				return vllmsim.Reply{Text: call("write_file", `{"path": "out.txt", "content": "2\n"}`)}, nil
			}
			return vllmsim.Reply{Text: call("write_file", `{"path": "out.txt", "content": "3\n"}`)}, nil
		case 2:
			return vllmsim.Reply{Text: call("done", `{"answer": "done"}`)}, nil
		}
		return vllmsim.Reply{}, fmt.Errorf("corpus: no scripted turn %d", i)
	}
	// The server outlives the subtest that starts it: the tito kind is
	// built after the chat one.
	c.model = vllmsim.Start(c.parent, vllmsim.Config{ToolParser: true, Respond: respond})
	return c.model
}

// corpusKinds are the kinds of datasets, in the order they are built (the
// -from kind branches the script kind's run).
//
// An agent-policy dataset (-policy agent) is not a kind here yet: it needs
// an installed harness (the agents component) and its own scripted server,
// and its readers are run over it by collect_agent_test.go (every export
// target, inspect -episode and -json, replay); joining it here, with its
// fuzz seeds, is left for later.
func corpusKinds() []corpusKind {
	modelKind := func(name, tokens string) corpusKind {
		return corpusKind{name: name, replay: []string{"-compare", "normalized"}, build: func(t *testing.T, c *corpus) string {
			srv := c.modelServer(t)
			tasks := writeTasks(t, filepath.Join(c.root, name+"-tasks"), map[string]string{"count.yaml": corpusCountTask, "mute.yaml": corpusMuteTask})
			// No max_tokens: token in, token out must ask vLLM for a
			// number (null is 16 tokens there).
			return collectKind(t, c, name, zero, "-tasks", tasks, "-repeats", "2", "-replicas", "2",
				"-policy", "openai", "-base-url", srv.URL+"/v1", "-model", srv.Config().Model, "-policy-opt", "tokens="+tokens)
		}}
	}
	return []corpusKind{
		{name: "script", build: func(t *testing.T, c *corpus) string {
			tasks := filepath.Join(c.root, "script-tasks")
			files := map[string]string{"too-long.yaml": corpusLongTask, "unverified.yaml": corpusUnverifiedTask}
			for _, f := range []string{"fix-sum.yaml", "config-migrate.yaml", "error-report.yaml"} {
				b, err := os.ReadFile(filepath.Join("../../examples/tasks", f))
				require.NoError(t, err)
				files[f] = string(b)
			}
			writeTasks(t, tasks, files)
			return collectKind(t, c, "script", zero, "-tasks", tasks, "-repeats", "2", "-replicas", "2")
		}},
		modelKind("openai-chat", "chat"),
		modelKind("openai-tito", "tito"),
		{name: "branching", build: func(t *testing.T, c *corpus) string {
			return collectKind(t, c, "branching", zero, "-tasks", "../../examples/tasks", "-repeats", "1", "-replicas", "2", "-branch", "at=2,width=2")
		}},
		{name: "from", build: func(t *testing.T, c *corpus) string {
			src := c.dir("script")
			if src == "" {
				t.Skip("the script kind was not built")
			}
			return collectKind(t, c, "from", zero, "-tasks", filepath.Join(c.root, "script-tasks"), "-from", src, "-branch", "at=1,width=2", "-replicas", "2")
		}},
		{name: "web", replay: []string{"-pixel-tolerance", "0.02"}, build: func(t *testing.T, c *corpus) string {
			if _, err := exec.LookPath("chromium"); err != nil {
				testenv.Missing(t, "chromium", "chromium is not installed (apt-get install chromium, or bash .ci/chromium-up.sh)")
			}
			return collectKind(t, c, "web", zero, "-tasks", "../../examples/tasks/web", "-repeats", "1", "-replicas", "2")
		}},
		{name: "docker", build: func(t *testing.T, c *corpus) string {
			requireDocker(t)
			return collectKind(t, c, "docker", zero, "-tasks", "../../examples/tasks/fix-sum.yaml", "-provider", "docker", "-repeats", "2", "-replicas", "2")
		}},
		{name: "gvisor", build: func(t *testing.T, c *corpus) string {
			// A memory-forking provider: its golden is a checkpoint image of
			// processes and files, its rootfs a directory kept for replay.
			testenv.NeedGvisor(t)
			rootfs := filepath.Join(c.root, "gvisor-rootfs")
			if err := gvisor.BusyboxRootfs(rootfs, "/bin/busybox"); err != nil {
				testenv.Missing(t, testenv.Gvisor, err.Error())
			}
			return collectKind(t, c, "gvisor", zero, "-tasks", "../../examples/tasks/fix-sum.yaml", "-provider", "gvisor",
				"-provider-opt", "rootfs="+rootfs, "-repeats", "2", "-replicas", "2")
		}},
		{name: "harbor", build: func(t *testing.T, c *corpus) string {
			requireDockerDebian(t)
			return collectKind(t, c, "harbor", zero, "-tasks", harborSuite+"/fix-greeting", "-provider", "docker", "-repeats", "2", "-replicas", "2")
		}},
		{name: "served", build: buildServed},
		{name: "merged", parts: func(c *corpus) []string { return c.partDirs }, build: func(t *testing.T, c *corpus) string {
			var parts []string
			for i := range 2 {
				parts = append(parts, collectKind(t, c, fmt.Sprintf("part-%d", i), zero, "-tasks", "../../examples/tasks", "-repeats", "2",
					"-replicas", "2", "-shard", fmt.Sprintf("%d/2", i)))
			}
			out := filepath.Join(c.root, "merged")
			code, stdout, stderr := runBin(t, 5*time.Minute, append([]string{"merge", "-out", out}, parts...)...)
			require.Equal(t, cli.ExitOK, code, "merge: %s%s", stdout, stderr)
			c.partDirs = parts
			return out
		}},
		{name: "resumed", build: func(t *testing.T, c *corpus) string {
			// The slow task of the signal tests, killed once an episode is
			// under way and a generation may have closed, then resumed.
			dir := filepath.Join(c.root, "resumed-tasks")
			mark := filepath.Join(dir, "started")
			spec := filepath.Join(writeTasks(t, dir, map[string]string{"slow.yaml": strings.Replace(slowTask, "- {kind: exec, cmd: sleep 0.25}\n  - {kind: exec, cmd: sleep 0.25}",
				"- {kind: exec, cmd: sleep 0.25}\n  - {kind: exec, cmd: 'touch "+mark+"; sleep 0.25'}", 1)}), "slow.yaml")
			out, work := filepath.Join(c.root, "resumed"), t.TempDir()
			args := []string{"collect", "-tasks", spec, "-out", out, "-replicas", "2", "-repeats", strconv.Itoa(slowRepeats), "-workdir", work, "-quiet"}
			cmd := exec.Command(forklineBin, append(args, "-roll-interval", "300ms")...)
			require.NoError(t, cmd.Start())
			require.Eventually(t, func() bool { _, err := os.Stat(mark); return err == nil }, 2*time.Minute, 10*time.Millisecond)
			time.Sleep(time.Second)
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			cmd.Wait()
			require.Equal(t, "running", string(manifestStatus(t, out)), "killed: nobody closed the run")
			code, stdout, stderr := runBin(t, 10*time.Minute, append(args[:len(args):len(args)], "-resume")...)
			require.Equal(t, cli.ExitOK, code, "%s%s", stdout, stderr)
			require.Equal(t, "complete", string(manifestStatus(t, out)))
			return out
		}},
	}
}

// buildServed serves the example tasks with the real binary and records
// what an OpenEnv client does: an episode solved to done, one closed
// mid-episode (kept as cancelled), then a SIGTERM that closes the dataset.
func buildServed(t *testing.T, c *corpus) string {
	out := filepath.Join(c.root, "served")
	cmd := exec.Command(forklineBin, "serve", "-addr", "127.0.0.1:0", "-tasks", "../../examples/tasks", "-out", out, "-workdir", t.TempDir())
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var logs syncBuffer
	cmd.Stdout = &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Write([]byte(sc.Text() + "\n"))
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		io.Copy(&logs, stderr)
	}()
	var base string
	select {
	case base = <-found:
	case <-time.After(2 * time.Minute):
		t.Fatalf("forkline serve did not say where it listens:\n%s", logs.String())
	}
	solved, err := openenvtest.Dial(base)
	require.NoError(t, err)
	_, err = solved.Reset(map[string]any{"task_id": "fix-sum", "episode_id": "served-solved"})
	require.NoError(t, err)
	for _, a := range []map[string]any{
		{"kind": "exec", "cmd": "sh sum.sh 3"},
		{"kind": "write_file", "path": "sum.sh", "content": "#!/bin/sh\nn=$1; i=1; total=0\nwhile [ \"$i\" -le \"$n\" ]; do total=$((total + i)); i=$((i + 1)); done\necho \"$total\"\n"},
		{"kind": "exec", "cmd": "sh sum.sh 3"},
		{"kind": "done", "answer": "fixed"},
	} {
		_, err := solved.Step(a)
		require.NoError(t, err)
	}
	solved.Disconnect()
	left, err := openenvtest.Dial(base)
	require.NoError(t, err)
	_, err = left.Reset(map[string]any{"task_id": "config-migrate", "episode_id": "served-left"})
	require.NoError(t, err)
	_, err = left.Step(map[string]any{"kind": "exec", "cmd": "ls"})
	require.NoError(t, err)
	left.Disconnect()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, cli.ExitOK, exitCode(cmd.Wait()), logs.String())
	return out
}

// corpusReaders are the readers, by name, in matrix order: each returns
// its cell ("ok ...", "refused: ...", "n/a") or fails t.
type corpusReader struct {
	name string
	read func(t *testing.T, c *corpus, k corpusKind, dir string) string
}

func corpusReaders() []corpusReader {
	readers := []corpusReader{
		{"inspect", func(t *testing.T, c *corpus, k corpusKind, dir string) string {
			code, stdout, stderr := runBin(t, 5*time.Minute, "inspect", dir)
			require.Equal(t, cli.ExitOK, code, "%s\n%s", tail(stdout), stderr)
			require.NotContains(t, stdout, "problems:")
			require.NotContains(t, stderr, "damaged")
			return "ok"
		}},
		{"inspect -json", func(t *testing.T, c *corpus, k corpusKind, dir string) string {
			s := inspectJSON(t, dir)
			return fmt.Sprintf("ok (%d ep)", s.Episodes)
		}},
		{"inspect -episode", func(t *testing.T, c *corpus, k corpusKind, dir string) string {
			s := inspectJSON(t, dir)
			reasons := map[string]string{}
			for _, task := range s.Tasks {
				for exit, id := range task.FirstByExit {
					if _, ok := reasons[exit]; !ok {
						reasons[exit] = id
					}
				}
			}
			require.NotEmpty(t, reasons)
			var names []string
			for exit, id := range reasons {
				code, stdout, stderr := runBin(t, 5*time.Minute, "inspect", dir, "-episode", id)
				require.Equal(t, cli.ExitOK, code, "inspect -episode %s (%s): %s%s", id, exit, tail(stdout), stderr)
				require.Contains(t, stdout, "episode "+id)
				names = append(names, exit)
			}
			sort.Strings(names)
			return "ok (" + strings.Join(names, ",") + ")"
		}},
		{"inspect -list", inspectListCell},
		{"inspect -a11y", inspectA11yCell},
		{"atif valid", atifCell},
		{"verify", func(t *testing.T, c *corpus, k corpusKind, dir string) string {
			code, stdout, stderr := runBin(t, 5*time.Minute, "verify", dir)
			require.Equal(t, cli.ExitOK, code, "%s%s", stdout, stderr)
			require.Contains(t, stdout, ": ok — ")
			return "ok"
		}},
	}
	for _, target := range export.Targets() {
		readers = append(readers, corpusReader{"export " + target, func(t *testing.T, c *corpus, k corpusKind, dir string) string {
			return exportCell(t, dir, target)
		}})
	}
	readers = append(readers,
		corpusReader{"replay", func(t *testing.T, c *corpus, k corpusKind, dir string) string {
			code, stdout, stderr := runBin(t, 10*time.Minute, append([]string{"replay", "-in", dir, "-workdir", t.TempDir(), "-quiet"}, k.replay...)...)
			m := regexp.MustCompile(`: (\d+) identical, 0 diverged, 0 errored`).FindStringSubmatch(stdout)
			require.True(t, code == cli.ExitOK && m != nil, "replay of an unchanged environment is identical: exit %d\n%s\n%s", code, tail(stdout), tail(stderr))
			return "ok (" + m[1] + " identical)"
		}},
		corpusReader{"view", func(t *testing.T, c *corpus, k corpusKind, dir string) string {
			base := startView(t, dir)
			var page struct {
				Matched  int `json:"matched"`
				Episodes []struct {
					ID string `json:"episode_id"`
				} `json:"episodes"`
			}
			require.Equal(t, http.StatusOK, getJSON(t, base+"/api/runs/0/episodes?limit=1000", &page))
			require.Equal(t, len(episodeSet(t, dir)), page.Matched, "the list holds every episode of the dataset")
			require.NotEmpty(t, page.Episodes)
			for _, e := range page.Episodes {
				require.Equal(t, http.StatusOK, getJSON(t, base+"/api/runs/0/episodes/"+e.ID, nil), "episode %s", e.ID)
			}
			return fmt.Sprintf("ok (%d ep)", page.Matched)
		}},
		corpusReader{"merge", func(t *testing.T, c *corpus, k corpusKind, dir string) string {
			if k.parts == nil {
				return "n/a"
			}
			parts := k.parts(c)
			again := filepath.Join(t.TempDir(), "again")
			code, stdout, stderr := runBin(t, 5*time.Minute, append([]string{"merge", "-out", again, "-json"}, parts...)...)
			require.Equal(t, cli.ExitOK, code, "%s%s", stdout, stderr)
			require.Equal(t, episodeSet(t, dir), episodeSet(t, again), "merging the parts again gives the same episodes")
			return fmt.Sprintf("ok (%d parts)", len(parts))
		}},
	)
	return readers
}

// inspectJSON is inspect -json of dir, which must read without a problem.
func inspectJSON(t *testing.T, dir string) inspect.Summary {
	t.Helper()
	code, stdout, stderr := runBin(t, 5*time.Minute, "inspect", dir, "-json")
	require.Equal(t, cli.ExitOK, code, "%s%s", tail(stdout), stderr)
	var s inspect.Summary
	require.NoError(t, json.Unmarshal([]byte(stdout), &s))
	require.Empty(t, s.Problems, "inspect -json finds no problem in a good dataset")
	require.NotNil(t, s.Policy, "the policy entry reads")
	return s
}

// exportCell exports dir to target: a write (exit 0, files written) or a
// refusal (exit 2, saying why); never a panic or a damaged dataset.
func exportCell(t *testing.T, dir, target string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), target)
	if target == "jsonl" {
		out = filepath.Join(t.TempDir(), "episodes.jsonl")
	}
	code, stdout, stderr := runBin(t, 5*time.Minute, "export", "-in", dir, "-to", target, "-out", out)
	for _, bad := range []string{"panic", "goroutine ", "damaged", "corrupt"} {
		require.NotContains(t, stderr, bad, "export -to %s", target)
	}
	switch code {
	case cli.ExitOK:
		st, err := os.Stat(out)
		require.NoError(t, err, "export -to %s wrote nothing:\n%s", target, stderr)
		if st.IsDir() {
			entries, err := os.ReadDir(out)
			require.NoError(t, err)
			require.NotEmpty(t, entries)
		}
		return "ok"
	case cli.ExitBadInput:
		why := lastLine(stderr)
		require.NotEmpty(t, why, "export -to %s refused without a reason", target)
		require.NoFileExists(t, out, "a refused export writes nothing")
		return "refused: " + refusal(why)
	}
	t.Fatalf("export -to %s: exit %d\nstdout:\n%s\nstderr:\n%s", target, code, tail(stdout), tail(stderr))
	return ""
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// refusal is the reason a refusal gives, shortened for the matrix: the
// counts by reason it ends with in parentheses, else its first words.
func refusal(s string) string {
	if i, j := strings.Index(s, " ("), strings.LastIndex(s, "); nothing written"); i >= 0 && j > i {
		s = s[i+2 : j]
	}
	s = strings.TrimPrefix(s, "export: ")
	if len(s) > 70 {
		s = s[:70] + "…"
	}
	return s
}

func TestDatasetCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a dataset of every kind and runs every reader over each")
	}
	c := &corpus{root: t.TempDir(), parent: t, dirs: map[string]string{}}
	if keep := os.Getenv(corpusKeepEnv); keep != "" {
		if err := os.MkdirAll(keep, 0o755); err != nil {
			t.Fatal(err)
		}
		c.root = keep
	}
	kinds := corpusKinds()
	readers := corpusReaders()
	skipped := map[string]string{}
	for _, k := range kinds {
		ok := t.Run("build/"+k.name, func(t *testing.T) {
			dir := k.build(t, c)
			c.mu.Lock()
			c.dirs[k.name] = dir
			c.mu.Unlock()
		})
		if c.dir(k.name) == "" {
			skipped[k.name] = "not built"
			if !ok {
				skipped[k.name] = "build failed"
			}
		}
	}

	var mu sync.Mutex
	cells := map[string]map[string]string{}
	t.Run("read", func(t *testing.T) {
		for _, k := range kinds {
			dir := c.dir(k.name)
			if dir == "" {
				continue
			}
			cells[k.name] = map[string]string{}
			for _, r := range readers {
				t.Run(k.name+"/"+r.name, func(t *testing.T) {
					t.Parallel()
					cell := "FAIL"
					defer func() {
						if t.Skipped() {
							// A reader whose component is missing here
							// (FORKLINE_HIDE; CI requires it) skipped.
							cell = "skipped"
						}
						mu.Lock()
						cells[k.name][r.name] = cell
						mu.Unlock()
					}()
					cell = r.read(t, c, k, dir)
				})
			}
		}
	})

	// The matrix: kinds down, readers across, each cell ok, refused (exit
	// 2 with a reason), n/a or FAIL; what the cells say besides, below it.
	var b strings.Builder
	b.WriteString("\ndataset corpus: kind × reader\n")
	short := func(r string) string { return strings.TrimPrefix(strings.TrimPrefix(r, "export "), "inspect ") }
	widths := make([]int, len(readers))
	w := len("kind")
	for _, k := range kinds {
		w = max(w, len(k.name))
	}
	fmt.Fprintf(&b, "%-*s", w, "kind")
	for i, r := range readers {
		widths[i] = max(len(short(r.name)), len("refused"))
		fmt.Fprintf(&b, "  %-*s", widths[i], short(r.name))
	}
	b.WriteString("\n")
	var notes []string
	for _, k := range kinds {
		fmt.Fprintf(&b, "%-*s", w, k.name)
		if why, ok := skipped[k.name]; ok {
			fmt.Fprintf(&b, "  %s\n", why)
			continue
		}
		for i, r := range readers {
			cell := cells[k.name][r.name]
			word, rest, _ := strings.Cut(cell, " ")
			word = strings.TrimSuffix(word, ":")
			fmt.Fprintf(&b, "  %-*s", widths[i], word)
			if rest != "" {
				notes = append(notes, fmt.Sprintf("  %s / %s: %s", k.name, r.name, strings.Trim(rest, "()")))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString(strings.Join(notes, "\n") + "\n")
	t.Log(b.String())
	// go test shows a passing package's log only with -v: CI names a file
	// to print the matrix from after the suite (.ci/run).
	if path := os.Getenv(corpusMatrixEnv); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	}
	failed := 0
	for _, row := range cells {
		for _, cell := range row {
			if cell == "FAIL" {
				failed++
			}
		}
	}
	require.Zero(t, failed, "every cell is green")

	// Every subcommand that reads a dataset is a reader of the corpus.
	readerNames := map[string]bool{}
	for _, r := range readers {
		readerNames[strings.Fields(r.name)[0]] = true
	}
	// relay carries a harness's model calls inside a sandbox: it reads no
	// dataset.
	notReaders := map[string]bool{"collect": true, "serve": true, "images": true, "version": true, "relay": true}
	for _, name := range subcommands() {
		require.True(t, readerNames[name] || notReaders[name], "subcommand %s: add it to the corpus readers, or to notReaders if it reads no dataset", name)
	}

	seedCorpus(t, c, kinds)
}

// corpusSeeds are the fuzz targets whose seeds are the corpus's manifests.
var corpusSeeds = []string{
	"../../formats/shard/testdata/fuzz/FuzzDecodeManifest",
	"../../manifest/testdata/fuzz/FuzzReadEntries",
}

// seedCorpus writes each built kind's manifest as a seed of the fuzz
// targets (-update), or requires that one is there.
func seedCorpus(t *testing.T, c *corpus, kinds []corpusKind) {
	t.Helper()
	for _, k := range kinds {
		dir := c.dir(k.name)
		if dir == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		require.NoError(t, err)
		for _, seeds := range corpusSeeds {
			file := filepath.Join(seeds, "corpus-"+k.name)
			if *update {
				require.NoError(t, os.MkdirAll(seeds, 0o755))
				require.NoError(t, os.WriteFile(file, []byte("go test fuzz v1\n[]byte("+strconv.Quote(string(data))+")\n"), 0o644))
				continue
			}
			_, err := os.Stat(file)
			require.NoError(t, err, "the %s kind's manifest is no seed of %s: run go test ./cmd/forkline -run TestDatasetCorpus -update", k.name, filepath.Base(seeds))
		}
	}
}
