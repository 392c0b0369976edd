package serve

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// A reward is written as a JSON float whatever its value, as Python's json
// writes a float (1.0, 0.0, 1e+21), and reads back as the same number.
func TestRewardIsAJSONFloat(t *testing.T) {
	for v, want := range map[float64]string{0: "0.0", 1: "1.0", -2: "-2.0", 0.5: "0.5", 1e21: "1e+21", 1e-7: "1e-7", 123456789: "123456789.0"} {
		b, err := json.Marshal(Reward(v))
		require.NoError(t, err)
		require.Equal(t, want, string(b), "%v", v)
		var back float64
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, v, back)
	}
	b, err := json.Marshal(StepResult{Reward: rewardOf(new(float64))})
	require.NoError(t, err)
	require.Contains(t, string(b), `"reward":0.0,`)
	b, err = json.Marshal(StepResult{})
	require.NoError(t, err)
	require.Contains(t, string(b), `"reward":null,`)
}

// The OpenAPI document's request schemas name exactly the keys the
// parsers take.
func TestRequestSchemasNameTheKeysTheParsersTake(t *testing.T) {
	keys := func(m map[string]any) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	rs := requestSchemas()
	require.ElementsMatch(t, resetKeys, keys(rs["ResetRequest"]["properties"].(map[string]any)))
	require.ElementsMatch(t, stepKeys, keys(rs["StepRequest"]["properties"].(map[string]any)))
	b, err := json.Marshal(TaskInfo{})
	require.NoError(t, err)
	var ti map[string]any
	require.NoError(t, json.Unmarshal(b, &ti))
	require.ElementsMatch(t, taskInfoKeys, keys(ti))
	require.ElementsMatch(t, taskInfoKeys, keys(rs["TaskInfo"]["properties"].(map[string]any)))
}
