package export

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/shard"
)

// A dataset whose manifest holds the policy entry in the form collectors
// wrote before the conversation was typed (every value a string; the
// manifest is manifest/testdata's, from commit e227819, an openai run with
// tool_mode=text, three actions and a 4096-byte observation cap) exports
// the conversation its model had: the recorded system prompt, calls in
// the text, observations as user messages capped as recorded, no tools.
func TestOldFormPolicyEntryExports(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "manifest", "testdata", "manifest-e227819-openai.json"))
	require.NoError(t, err)
	var m struct {
		Policy map[string]any `json:"policy"`
	}
	require.NoError(t, json.Unmarshal(raw, &m))
	conv := m.Policy["conversation"].(map[string]any)
	require.IsType(t, "", conv["actions"], "the fixture is of the old form")

	dir := t.TempDir()
	run := writeRun(t, dir, runSpec{runID: "run-old", policy: m.Policy, episodes: []shard.EpisodeBatch{
		episodeBatch("old-0", epOpts{task: "shell", exit: "done", turns: 1, reward: ptr(1.0)}),
	}})
	out := filepath.Join(t.TempDir(), "chat")
	exportOK(t, Options{Inputs: []string{run}, Target: "chat-jsonl", Out: out})
	data, err := os.ReadFile(filepath.Join(out, "train.jsonl"))
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	require.True(t, sc.Scan())
	var line struct {
		Messages []struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []any   `json:"tool_calls"`
		} `json:"messages"`
		Tools []any `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
	require.Equal(t, "system", line.Messages[0].Role)
	assert.Equal(t, conv["system_prompt"], *line.Messages[0].Content, "the recorded system prompt, as the model was sent it")
	assert.Nil(t, line.Tools, "tool_mode=text: the model saw its tools in the prompt, not as functions")
	for i, msg := range line.Messages[2:] {
		assert.NotEqual(t, "tool", msg.Role, "message %d: text tool calls get observations as user messages", i+2)
		assert.Empty(t, msg.ToolCalls, "message %d", i+2)
	}
}

// A run whose policy talked to no model (the script policy: no recorded
// conversation) exports the tools each task allows (docs/TASKS.md): a shell
// task's SFT rows offer exec, read_file, write_file and done, never the
// browser tools. They offered all eleven before.
func TestScriptRunExportsTheTasksTools(t *testing.T) {
	dir := t.TempDir()
	run := writeRun(t, dir, runSpec{runID: "run-script", policy: map[string]any{"name": "script", "script_file": "", "script_sha256": "", "options": map[string]string{}},
		episodes: []shard.EpisodeBatch{episodeBatch("script-0", epOpts{task: "shell", exit: "done", turns: 0, reward: ptr(1.0)})}})
	out := filepath.Join(t.TempDir(), "chat")
	exportOK(t, Options{Inputs: []string{run}, Target: "chat-jsonl", Out: out})
	data, err := os.ReadFile(filepath.Join(out, "train.jsonl"))
	require.NoError(t, err)
	var line struct {
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(data), &line))
	var names []string
	for _, tl := range line.Tools {
		names = append(names, tl.Function.Name)
	}
	assert.ElementsMatch(t, []string{"exec", "read_file", "write_file", "done"}, names)
}
