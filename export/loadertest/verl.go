package loadertest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/forkline/forkline/formats/model/tabletest"
)

//go:embed verl_harness.py
var harness []byte

// Python is the interpreter the documented verl classes run under:
// Debian's, in isolated mode, with nothing but the standard library.
const Python = "/usr/bin/python3"

// PythonAvailable reports why the verl checks cannot run, or nil.
func PythonAvailable() error {
	if _, err := os.Stat(Python); err != nil {
		return fmt.Errorf("%s: %w", Python, err)
	}
	return nil
}

// Docs returns the path of a file in the repository's docs/ directory.
func Docs(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "docs", name)
}

// pandasRows reads a Parquet file as verl does (pd.read_parquet with
// dtype_backend="pyarrow", then row dicts): every struct a dict with all of
// its struct's keys, null ones None; lists as lists.
func pandasRows(path string) ([]map[string]any, error) {
	tab, err := tabletest.ReadParquetFile(path)
	if err != nil {
		return nil, err
	}
	return tab.Rows, nil
}

// VerlSFT loads a verl-sft file as verl's MultiTurnSFTDataset with
// data.custom_cls = docs/verl_sft_dataset.py's ForklineSFTDataset does, and
// returns per row the messages _build_messages gives and the tools passed
// to the chat template. config is the dataset config (data.*), e.g.
// {"forkline_tool_args": "string"}.
func VerlSFT(ctx context.Context, path string, config map[string]any) ([]Conversation, error) {
	rows, err := pandasRows(path)
	if err != nil {
		return nil, err
	}
	var out []struct {
		Messages json.RawMessage `json:"messages"`
		Tools    json.RawMessage `json:"tools"`
	}
	if err := runHarness(ctx, map[string]any{"mode": "sft", "module": Docs("verl_sft_dataset.py"), "rows": rows, "config": config}, &out); err != nil {
		return nil, err
	}
	convs := make([]Conversation, len(out))
	for i, o := range out {
		convs[i] = Conversation{Messages: o.Messages, Tools: o.Tools}
		if bytes.Equal(bytes.TrimSpace(o.Tools), []byte("null")) {
			convs[i].Tools = nil
		}
	}
	return convs, nil
}

// RLHFRow is what verl's RLHFDataset.__getitem__ makes of a verl-agent row
// (rl_dataset.py), for text rows: the row's columns, raw_prompt (the prompt
// messages, each {role, content} strings), index, tools_kwargs and
// interaction_kwargs from extra_info. The agent loop gets them all as
// keyword arguments. It fails where verl would.
func RLHFRow(row Row) (map[string]any, error) {
	prompt, ok := row["prompt"].([]any)
	if !ok || len(prompt) == 0 {
		return nil, errors.New("loadertest: RLHFDataset: prompt is not a list of messages")
	}
	for i, m := range prompt {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("loadertest: RLHFDataset: prompt[%d] is not a message", i)
		}
		if _, ok := mm["role"].(string); !ok {
			return nil, fmt.Errorf("loadertest: RLHFDataset: prompt[%d] has no role", i)
		}
		if _, ok := mm["content"].(string); !ok {
			return nil, fmt.Errorf("loadertest: RLHFDataset: prompt[%d] has no string content", i)
		}
	}
	if _, ok := row["data_source"].(string); !ok {
		return nil, errors.New("loadertest: RLHFDataset: no data_source (the reward managers pick a scorer by it)")
	}
	out := map[string]any{}
	for k, v := range row {
		out[k] = v
	}
	out["raw_prompt"] = prompt
	info, _ := row["extra_info"].(map[string]any)
	if info == nil {
		info = map[string]any{}
	}
	out["index"] = int64(0)
	if idx, ok := info["index"]; ok && idx != nil {
		out["index"] = idx
	}
	out["tools_kwargs"] = map[string]any{}
	out["interaction_kwargs"] = map[string]any{}
	if name, _ := row["agent_name"].(string); name == "" {
		return nil, errors.New("loadertest: no agent_name: verl would run its single-turn loop, not the replay")
	}
	return out, nil
}

// VerlAgentReplay runs docs/verl_agent_loop.py's ForklineReplayAgentLoop on
// each row's keyword arguments (RLHFRow) with the given rollout lengths and
// returns the AgentLoopOutput fields it builds.
func VerlAgentReplay(ctx context.Context, kwargs []map[string]any, promptLength, responseLength int) ([]map[string]json.RawMessage, error) {
	var out []map[string]json.RawMessage
	err := runHarness(ctx, map[string]any{"mode": "agent", "module": Docs("verl_agent_loop.py"), "rows": kwargs,
		"prompt_length": promptLength, "response_length": responseLength}, &out)
	return out, err
}

func runHarness(ctx context.Context, req any, out any) error {
	in, err := json.Marshal(req)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "loadertest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "harness.py")
	if err := os.WriteFile(script, harness, 0o644); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, Python, "-I", script)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("loadertest: the verl harness failed: %w\n%s", err, stderr.String())
	}
	return json.Unmarshal(stdout.Bytes(), out)
}
