package jsonl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/schemas"
)

func TestWriterNestsStepsInOrder(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	v := 0.5
	for _, id := range []string{"a", "b"} {
		ep := &model.Episode{Row: schemas.EpisodeRow{EpisodeID: id, RunID: "r", TaskID: "t", ExitReason: "done", Steps: 2},
			Instruction: "not written: the line holds the native rows only"}
		for i := range 2 {
			ep.Steps = append(ep.Steps, schemas.StepRow{EpisodeID: id, StepIndex: int32(i), ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"x"}`, Output: id})
		}
		ep.Rewards = []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: &v}}
		require.NoError(t, w.Write(ep))
	}
	require.Zero(t, buf.Len(), "lines are buffered until Close")
	require.NoError(t, w.Close())
	require.NotContains(t, buf.String(), "not written")
	sc := bufio.NewScanner(&buf)
	lines := 0
	for sc.Scan() {
		var ep map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ep))
		require.EqualValues(t, 2, ep["steps"], "the step count survives next to the nested rows")
		rows := ep["step_rows"].([]any)
		require.Len(t, rows, 2)
		require.EqualValues(t, 1, rows[1].(map[string]any)["step_index"])
		require.Equal(t, ep["episode_id"], rows[0].(map[string]any)["output"])
		require.EqualValues(t, 0.5, ep["rewards"].([]any)[0].(map[string]any)["value"])
		lines++
	}
	require.Equal(t, 2, lines)
}

// Encode writes one line per episode, empty arrays for missing steps or
// rewards, and text as it is (no HTML escaping); lines are buffered until
// Flush.
func TestEncoderOneLinePerEpisode(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	require.NoError(t, enc.Encode(schemas.EpisodeRow{EpisodeID: "a", Answer: "<b> & c"}, nil, nil))
	v := 1.0
	require.NoError(t, enc.Encode(schemas.EpisodeRow{EpisodeID: "b"},
		[]schemas.StepRow{{EpisodeID: "b", ActionKind: "done"}}, []schemas.RewardRow{{EpisodeID: "b", Name: "verify", Value: &v}}))
	require.Zero(t, buf.Len(), "nothing reaches the writer before Flush")
	require.NoError(t, enc.Flush())
	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	require.Len(t, lines, 2)
	require.Contains(t, string(lines[0]), `"answer":"<b> & c"`)
	require.Contains(t, string(lines[0]), `"step_rows":[],"rewards":[]`)
	var ep Episode
	require.NoError(t, json.Unmarshal(lines[1], &ep))
	require.Equal(t, "b", ep.EpisodeID)
	require.Len(t, ep.Steps, 1)
	require.Equal(t, 1.0, *ep.Rewards[0].Value)
}
