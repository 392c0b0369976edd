package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/schemas"

	"github.com/forkline/forkline/policy/openai/openaitest"
)

// treeHash hashes everything in dir: every path, its type and mode, and
// for files their size, modification time and content. Two equal hashes
// mean no file was written, created, removed or touched.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s\x00%s\x00", rel, info.Mode())
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			fmt.Fprintf(h, "%d\x00%d\x00%x\x00", info.Size(), info.ModTime().UnixNano(), sum)
		}
		return nil
	}))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runCaptured runs the command in-process and returns its exit code and
// what it printed.
func runCaptured(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var code int
	out := captureOutput(t, func() { code = collectInProcess(args) })
	return code, string(out)
}

// Every numeric flag is validated: out of range, the command exits 2,
// names the flag, its value and the range, and writes nothing.
func TestCollectNumericFlagsAreRefused(t *testing.T) {
	cases := map[string]string{
		"-replicas=0": "want an integer >= 1", "-replicas=-3": "want an integer >= 1",
		"-repeats=0": "want an integer >= 1", "-repeats=-1": "want an integer >= 1",
		"-standby=-1": "want an integer >= 0", "-max-creates=0": "want an integer >= 1", "-max-creates=-2": "want an integer >= 1",
		"-grace=-1s": "want a duration >= 0", "-roll-mb=0": "want an integer from 1 to", "-roll-mb=-5": "want an integer from 1 to",
		"-roll-mb=99999999999": "want an integer from 1 to", "-roll-interval=0s": "want a positive duration",
		"-roll-interval=-1m": "want a positive duration", "-shard-count=0": "want an integer >= 1",
		"-shard-count=-2": "want an integer >= 1",
		"-max-loss=-1":    "0 <= F <= 100", "-max-loss=101%": "0 <= F <= 100", "-max-loss=lots": "0 <= F <= 100",
	}
	dir := t.TempDir()
	for arg, want := range cases {
		t.Run(arg, func(t *testing.T) {
			out := filepath.Join(dir, "run")
			code, printed := runCaptured(t, "-tasks", "../../examples/tasks/fix-sum.yaml", "-out", out, "-workdir", t.TempDir(), "-quiet", arg)
			require.Equal(t, cli.ExitBadInput, code, printed)
			flagName, value, _ := strings.Cut(arg, "=")
			require.Contains(t, printed, flagName+" "+value)
			require.Contains(t, printed, want)
			_, err := os.Stat(out)
			require.True(t, os.IsNotExist(err), "a refused command writes nothing")
		})
	}
}

// exampleTasks copies two example tasks into a directory of their own, so
// a test can edit, remove or add one.
func exampleTasks(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range []string{"fix-sum.yaml", "config-migrate.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../examples/tasks", n))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), b, 0o644))
	}
	return dir
}

// A resume refused for a mismatch leaves every byte of the dataset as it
// was — a complete run, and a partial one holding leftovers a resume
// would delete — exits 2 and names both the run's value and this command's.
func TestRefusedResumeLeavesTheDatasetUntouched(t *testing.T) {
	tasks := exampleTasks(t)
	oneTask := filepath.Join(tasks, "fix-sum.yaml")
	edited := t.TempDir()
	added := t.TempDir()
	for _, n := range []string{"fix-sum.yaml", "config-migrate.yaml"} {
		b, err := os.ReadFile(filepath.Join(tasks, n))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(added, n), b, 0o644))
		if n == "config-migrate.yaml" {
			b = bytes.Replace(b, []byte("(upper case)"), []byte("(in upper case)"), 1)
		}
		require.NoError(t, os.WriteFile(filepath.Join(edited, n), b, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(added, "extra.yaml"), []byte("id: extra\ninstruction: x\nsolution:\n  - {kind: done}\n"), 0o644))
	script := filepath.Join(t.TempDir(), "acts.jsonl")
	require.NoError(t, os.WriteFile(script, []byte(`{"kind":"done","answer":"x"}`+"\n"), 0o644))
	captureFile := filepath.Join(t.TempDir(), "capture.yaml")
	require.NoError(t, os.WriteFile(captureFile, []byte("tokens: drop\n"), 0o644))

	base := func(out, tasks string) []string {
		return []string{"-tasks", tasks, "-out", out, "-workdir", t.TempDir(), "-quiet", "-replicas", "2", "-repeats", "2", "-seed", "3"}
	}
	cases := []struct {
		name  string
		tasks string
		extra []string
		want  []string
	}{
		{"repeats", tasks, []string{"-repeats", "3"}, []string{"-repeats: the run used 2, this command gives 3"}},
		{"seed", tasks, []string{"-seed", "4"}, []string{"-seed: the run used 3, this command gives 4"}},
		{"shard", tasks, []string{"-shard", "0/2"}, []string{"-shard: the run used 0/1, this command gives 0/2"}},
		{"capture pixels", tasks, []string{"-pixels", "none"}, []string{`the run used {"text":"full","pixels":"hash"`, `this command gives {"text":"full","pixels":"none"`}},
		{"capture text", tasks, []string{"-text", "cap:100"}, []string{`"text":"full"`, `"text":"cap:100"`}},
		{"capture file", tasks, []string{"-capture", captureFile}, []string{`"tokens":"keep"`, `"tokens":"drop"`}},
		{"task missing", oneTask, nil, []string{"task config-migrate of the run being resumed is not among the tasks given"}},
		{"task edited", edited, nil, []string{"task config-migrate changed since the run started"}},
		{"task added", added, nil, []string{"task extra is not in the run being resumed"}},
		{"provider", tasks, []string{"-provider", "docker"}, []string{"-provider: the run used local, this command gives docker"}},
		{"policy", tasks, []string{"-policy", "openai", "-base-url", "http://127.0.0.1:1/v1"}, []string{"-policy: the run used script, this command gives openai"}},
		{"script", tasks, []string{"-script", script}, []string{"-script: the run used each task's solution, this command gives " + script}},
		{"several", tasks, []string{"-repeats", "3", "-seed", "9", "-pixels", "none"}, []string{"-repeats: the run used 2", "-seed: the run used 3", `"pixels":"none"`}},
	}

	complete := filepath.Join(t.TempDir(), "complete")
	code, printed := runCaptured(t, base(complete, tasks)...)
	require.Equal(t, cli.ExitOK, code, printed)
	// A partial run with what a crash leaves: a temporary shard and a
	// shard no manifest lists, which an accepted resume would delete.
	partial := filepath.Join(t.TempDir(), "partial")
	code, printed = runCaptured(t, base(partial, tasks)...)
	require.Equal(t, cli.ExitOK, code, printed)
	m, err := os.ReadFile(filepath.Join(partial, "manifest.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(partial, "manifest.json"), bytes.Replace(m, []byte(`"status": "complete"`), []byte(`"status": "partial"`), 1), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(partial, "steps", ".part-00042.parquet.tmp"), []byte("half"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(partial, "episodes", "part-00042.parquet"), []byte("unlisted"), 0o644))

	for _, out := range []string{complete, partial} {
		for _, c := range cases {
			t.Run(filepath.Base(out)+"/"+c.name, func(t *testing.T) {
				before := treeHash(t, out)
				args := append(append(base(out, c.tasks), "-resume"), c.extra...)
				code, printed := runCaptured(t, args...)
				require.Equal(t, cli.ExitBadInput, code, printed)
				require.Equal(t, before, treeHash(t, out), "a refused resume changes nothing:\n%s", printed)
				require.Contains(t, printed, "cannot resume")
				for _, w := range c.want {
					require.Contains(t, printed, w)
				}
			})
		}
	}
}

// Resuming a complete run says there is nothing to do, exits 0 and
// changes nothing — also when it differs from the run only in settings
// that do not change an episode.
func TestResumeOfACompleteRunChangesNothing(t *testing.T) {
	tasks := exampleTasks(t)
	out := filepath.Join(t.TempDir(), "run")
	base := []string{"-tasks", tasks, "-out", out, "-workdir", t.TempDir(), "-replicas", "2", "-repeats", "2"}
	code, printed := runCaptured(t, append(base, "-quiet")...)
	require.Equal(t, cli.ExitOK, code, printed)
	before := treeHash(t, out)
	for _, extra := range [][]string{
		nil,
		{"-replicas", "3", "-standby", "1", "-max-creates", "2", "-grace", "1s", "-roll-mb", "1", "-reset", "recreate"},
		{"-provider-opt", "fork=copy"},
	} {
		code, printed = runCaptured(t, append(append(base, "-resume"), extra...)...)
		require.Equal(t, cli.ExitOK, code, printed)
		require.Contains(t, printed, "nothing to do — the run is complete: 4 of 4 planned episodes kept; nothing was changed")
		require.NotContains(t, printed, "exit reasons:", "no empty sections")
		require.Equal(t, before, treeHash(t, out))
	}
}

// A resume of a damaged run is refused with exit 2, naming the shard, and
// changes nothing — whether the run is complete or partial: 64 garbled
// bytes in, or the second half cut off, a steps shard. Before the fix the
// complete run's resume exited 0 ("nothing to do") and its status stayed
// complete; only a partial run's resume checked the shards.
func TestResumeOfADamagedRunIsRefused(t *testing.T) {
	tasks := exampleTasks(t)
	orig := filepath.Join(t.TempDir(), "run")
	base := func(out string) []string {
		return []string{"-tasks", tasks, "-out", out, "-workdir", t.TempDir(), "-quiet", "-replicas", "2", "-repeats", "2"}
	}
	code, printed := runCaptured(t, base(orig)...)
	require.Equal(t, cli.ExitOK, code, printed)
	for _, status := range []string{"complete", "partial"} {
		for _, c := range []struct {
			name   string
			damage func(data []byte) []byte
		}{
			{"64 garbled bytes", func(data []byte) []byte {
				for i := range 64 {
					data[len(data)/3+i] ^= 0x5a
				}
				return data
			}},
			{"half of it", func(data []byte) []byte { return data[:len(data)/2] }},
		} {
			t.Run(status+"/"+c.name, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "run")
				require.NoError(t, os.CopyFS(out, os.DirFS(orig)))
				if status == "partial" {
					m, err := os.ReadFile(filepath.Join(out, "manifest.json"))
					require.NoError(t, err)
					require.NoError(t, os.WriteFile(filepath.Join(out, "manifest.json"), bytes.Replace(m, []byte(`"status": "complete"`), []byte(`"status": "partial"`), 1), 0o644))
				}
				ds, err := shard.Open(out)
				require.NoError(t, err)
				file := ds.Shards(schemas.TableSteps)[0].File
				path := filepath.Join(out, file)
				data, err := os.ReadFile(path)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(path, c.damage(data), 0o644))
				before := treeHash(t, out)

				code, printed := runCaptured(t, append(base(out), "-resume")...)
				require.Equal(t, cli.ExitBadInput, code, printed)
				require.Contains(t, printed, filepath.FromSlash(file))
				require.Contains(t, printed, "the manifest says")
				require.Equal(t, before, treeHash(t, out), "a refused resume changes nothing")
			})
		}
	}
}

// A run collected with -policy openai: a resume with another option that
// shapes the episodes (the server, the model, the sampling, the prompt's
// text) or another policy is refused untouched; one that differs only in
// how requests are made (retries, timeout, the prompt file's path) is
// accepted, and on a complete run has nothing to do.
func TestResumeOfAnOpenAIRunComparesItsOptions(t *testing.T) {
	srv := openaitest.New(t, map[string][]openaitest.Turn{
		"act": {{ToolCalls: []openaitest.ToolCall{{ID: "c1", Name: "done", Args: `{}`}}}},
	})
	spec := filepath.Join(t.TempDir(), "act.yaml")
	require.NoError(t, os.WriteFile(spec, []byte("id: act\ninstruction: 'scenario: act'\nsolution:\n  - {kind: done}\n"), 0o644))
	prompts := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(prompts, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	prompt := write("system.txt", "You are careful. {{tools}}")
	samePrompt := write("copy.txt", "You are careful. {{tools}}")
	otherPrompt := write("other.txt", "You are reckless. {{tools}}")
	t.Setenv("OPENAI_API_KEY", "")

	out := filepath.Join(t.TempDir(), "run")
	// args is the run's command with some flags replaced or added.
	args := func(change map[string]string) []string {
		flags := map[string]string{"-policy": "openai", "-base-url": srv.URL, "-model": "m", "-temperature": "0.7",
			"-retries": "1", "-policy-opt backoff": "1ms", "-policy-opt system_prompt_file": prompt}
		for k, v := range change {
			flags[k] = v
		}
		a := []string{"-tasks", spec, "-out", out, "-workdir", t.TempDir(), "-quiet", "-repeats", "2"}
		for _, k := range slices.Sorted(maps.Keys(flags)) {
			if v := flags[k]; v != "" {
				if opt, ok := strings.CutPrefix(k, "-policy-opt "); ok {
					a = append(a, "-policy-opt", opt+"="+v)
				} else {
					a = append(a, k, v)
				}
			}
		}
		return a
	}
	code, printed := runCaptured(t, args(nil)...)
	require.Equal(t, cli.ExitOK, code, printed)
	before := treeHash(t, out)

	for name, c := range map[string]struct {
		change map[string]string
		want   string
	}{
		"model":       {map[string]string{"-model": "other"}, `-policy-opt model: the run used "m", this command gives "other"`},
		"temperature": {map[string]string{"-temperature": "0.2"}, `-policy-opt temperature: the run used "0.7", this command gives "0.2"`},
		"max tokens":  {map[string]string{"-max-tokens": "9"}, `-policy-opt max_tokens: the run used none (the default), this command gives "9"`},
		"server":      {map[string]string{"-base-url": "http://127.0.0.1:1/v1"}, "-policy-opt base_url: the run used"},
		"prompt text": {map[string]string{"-policy-opt system_prompt_file": otherPrompt}, "the conversation's system_prompt differs"},
		"policy": {map[string]string{"-policy": "script", "-base-url": "", "-model": "", "-temperature": "", "-retries": "",
			"-policy-opt backoff": "", "-policy-opt system_prompt_file": ""}, "-policy: the run used openai, this command gives script"},
	} {
		t.Run(name, func(t *testing.T) {
			code, printed := runCaptured(t, append(args(c.change), "-resume")...)
			require.Equal(t, cli.ExitBadInput, code, printed)
			require.Contains(t, printed, c.want)
			require.Equal(t, before, treeHash(t, out), "a refused resume changes nothing")
		})
	}

	code, printed = runCaptured(t, append(args(map[string]string{"-policy-opt system_prompt_file": samePrompt,
		"-request-timeout": "9s", "-retries": "3", "-policy-opt backoff": "5ms"}), "-resume")...)
	require.Equal(t, cli.ExitOK, code, printed)
	require.Contains(t, printed, "nothing to do")
	require.Equal(t, before, treeHash(t, out))
}
