package episode

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/task"
)

// OpenEnv on the local provider: a good environment carries the manifest's
// provider entry (settings never nil) and closes; one refused after the
// provider opened — a task that needs a filesystem of its own on a provider
// that shares the host's — is an error that names why, with everything it
// opened closed (the first version set the provider to nil before closing
// it, and forkline collect panicked on a Harbor folder with -provider
// local: cmd/forkline TestCollectHarborSuite).
func TestOpenEnvOpensAndRefusesCleanly(t *testing.T) {
	ok := task.Spec{ID: "ok", Instruction: "nothing"}
	tmpl, err := Template(&ok)
	require.NoError(t, err)
	env, err := OpenEnv(context.Background(), EnvConfig{Provider: "local", Options: providers.Options{RunID: "env-test", Dir: t.TempDir()},
		Specs: []task.Spec{ok}, Templates: map[string]*pool.Template{"ok": tmpl}, Pool: pool.Config{Replicas: 1}})
	require.NoError(t, err)
	require.Equal(t, "local", env.Record.Name)
	require.NotNil(t, env.Record.Params)
	require.NotNil(t, env.Record.Capabilities)
	require.Equal(t, string(env.Pool.Strategy()), env.Record.Reset)
	require.NoError(t, env.Close(context.Background()))

	own := task.Spec{ID: "own", Instruction: "nothing", Verify: &task.Verify{Cmd: "true", Reward: "exit", Dir: "/tests"}}
	_, err = OpenEnv(context.Background(), EnvConfig{Provider: "local", Options: providers.Options{RunID: "env-test", Dir: t.TempDir()},
		Specs: []task.Spec{own}, Pool: pool.Config{Replicas: 1}})
	require.ErrorContains(t, err, "needs sandboxes with a filesystem of their own: provider local runs commands on the host")

	_, err = OpenEnv(context.Background(), EnvConfig{Provider: "nope", Pool: pool.Config{Replicas: 1}})
	require.ErrorContains(t, err, `unknown provider "nope"`)
}
