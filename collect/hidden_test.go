package collect

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The flagship example's tests are hidden verifier files: an agent that
// rewrites test.sh to exit 0 (as it could when test.sh was one of the
// task's files) earns nothing, because test.sh is not there during the
// episode and the task's own is placed before the verifier runs; the
// scripted fix still earns 1.
func TestRewritingTheTestsEarnsNothing(t *testing.T) {
	cheat := filepath.Join(t.TempDir(), "cheat.jsonl")
	require.NoError(t, os.WriteFile(cheat, []byte(
		`{"kind":"exec","cmd":"test -e test.sh && echo test.sh is here || echo no test.sh"}`+"\n"+
			`{"kind":"write_file","path":"test.sh","content":"exit 0\n"}`+"\n"+
			`{"kind":"done","answer":"the tests pass now"}`+"\n"), 0o644))
	cfg := baseConfig(t, "../examples/tasks/fix-sum.yaml")
	cfg.ScriptFile = cheat
	_, err := Run(context.Background(), cfg)
	require.ErrorIs(t, err, nil)
	eps, steps, rewards := readAll(t, cfg.Out)
	require.Len(t, eps, 2)
	for id := range eps {
		require.Equal(t, "no test.sh\n", steps[id][0].Output, "the hidden test is absent during the episode")
		r := rewards[id]
		require.NotNil(t, r.Value, r.Detail)
		require.Equal(t, 0.0, *r.Value, "the rewritten test.sh was replaced before verification: %s", r.Detail)
		require.Contains(t, r.Detail, "FAIL: sum.sh 3 = 3, want 6")
	}

	honest := baseConfig(t, "../examples/tasks/fix-sum.yaml")
	_, err = Run(context.Background(), honest)
	require.NoError(t, err)
	_, _, rewards = readAll(t, honest.Out)
	for _, r := range rewards {
		require.NotNil(t, r.Value, r.Detail)
		require.Equal(t, 1.0, *r.Value, r.Detail)
	}
}
