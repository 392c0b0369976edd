package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/testenv"
)

// atifValidation is what testdata/atif/validate.py prints.
type atifValidation struct {
	Files  int      `json:"files"`
	Errors []string `json:"errors"`
}

// validateATIF checks files with the jsonschema library against the schema
// written from Harbor's RFC, and the RFC's prose rules (validate.py).
func validateATIF(t *testing.T, files ...string) atifValidation {
	t.Helper()
	python := testenv.NeedValidators(t)
	args := append([]string{"testdata/atif/validate.py", "testdata/atif/trajectory-v1.4.schema.json"}, files...)
	out, err := exec.Command(python, args...).Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, stderr)
	var v atifValidation
	require.NoError(t, json.Unmarshal(out, &v), string(out))
	return v
}

// atifCell exports a dataset another command wrote to ATIF and checks
// every trajectory: valid against the RFC's schema and rules, one per
// episode the export writes, each agent step's token ids and logprobs the
// ones the step rows hold (read from the lossless jsonl export), and the
// validator able to fail (a broken copy of one trajectory is refused).
func atifCell(t *testing.T, c *corpus, k corpusKind, dir string) string {
	out := filepath.Join(t.TempDir(), "atif")
	code, stdout, stderr := runBin(t, 5*time.Minute, "export", "-in", dir, "-to", "atif", "-out", out, "-quiet")
	require.Equal(t, cli.ExitOK, code, "%s%s", stdout, stderr)
	files, err := filepath.Glob(filepath.Join(out, "train", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	v := validateATIF(t, files...)
	require.Equal(t, len(files), v.Files)
	require.Empty(t, v.Errors)

	// Token ids and logprobs, step by step, against the step rows.
	rows := jsonlTokens(t, dir)
	withTokens := 0
	for _, f := range files {
		var tr struct {
			SessionID string `json:"session_id"`
			Steps     []struct {
				Source  string `json:"source"`
				Metrics *struct {
					PromptIDs   []int32   `json:"prompt_token_ids"`
					ResponseIDs []int32   `json:"completion_token_ids"`
					Logprobs    []float32 `json:"logprobs"`
				} `json:"metrics"`
				Extra struct {
					StepIndex *int `json:"step_index"`
				} `json:"extra"`
			} `json:"steps"`
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &tr))
		steps, ok := rows[tr.SessionID]
		require.True(t, ok, "trajectory %s is an episode of the dataset", tr.SessionID)
		for _, s := range tr.Steps {
			if s.Source != "agent" || s.Extra.StepIndex == nil {
				continue
			}
			want, own := steps[*s.Extra.StepIndex]
			if !own {
				continue // a branch's prefix: its parent's rows hold it
			}
			if len(want.ResponseIDs) == 0 {
				require.True(t, s.Metrics == nil || len(s.Metrics.ResponseIDs) == 0)
				continue
			}
			require.NotNil(t, s.Metrics, "episode %s step %d has tokens", tr.SessionID, *s.Extra.StepIndex)
			require.Equal(t, want.PromptIDs, s.Metrics.PromptIDs)
			require.Equal(t, want.ResponseIDs, s.Metrics.ResponseIDs)
			require.Equal(t, want.Logprobs, s.Metrics.Logprobs)
			withTokens++
		}
	}

	// The validator can fail: the same trajectory with a step id skipped.
	var doc map[string]any
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &doc))
	doc["steps"].([]any)[0].(map[string]any)["step_id"] = 7
	doc["schema_version"] = 1.4
	broken := filepath.Join(t.TempDir(), "broken.json")
	b, err = json.Marshal(doc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(broken, b, 0o644))
	bad := validateATIF(t, broken)
	require.Len(t, bad.Errors, 2, "the schema refuses a number as schema_version and the rules a step id out of order: %v", bad.Errors)
	return fmt.Sprintf("ok (%d trajectories, %d token steps)", len(files), withTokens)
}

type stepTokens struct {
	PromptIDs   []int32   `json:"prompt_ids"`
	ResponseIDs []int32   `json:"response_ids"`
	Logprobs    []float32 `json:"response_logprobs"`
}

// jsonlTokens is every step's token record, by episode and step index,
// from the jsonl export.
func jsonlTokens(t *testing.T, dir string) map[string]map[int]stepTokens {
	out := filepath.Join(t.TempDir(), "tokens.jsonl")
	code, stdout, stderr := runBin(t, 5*time.Minute, "export", "-in", dir, "-to", "jsonl", "-out", out, "-quiet")
	require.Equal(t, cli.ExitOK, code, "%s%s", stdout, stderr)
	all := map[string]map[int]stepTokens{}
	sc := bufio.NewScanner(openFile(t, out))
	sc.Buffer(nil, 256<<20)
	for sc.Scan() {
		var line struct {
			EpisodeID string `json:"episode_id"`
			Steps     []struct {
				StepIndex int `json:"step_index"`
				stepTokens
			} `json:"step_rows"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		m := map[int]stepTokens{}
		for _, s := range line.Steps {
			m[s.StepIndex] = s.stepTokens
		}
		all[line.EpisodeID] = m
	}
	require.NoError(t, sc.Err())
	return all
}
