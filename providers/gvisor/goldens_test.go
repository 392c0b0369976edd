package gvisor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
)

// A golden checkpointed with the goldens param is kept in the store; a
// later provider (another run) gets it back for the same spec and label —
// with the processes it ran — and nothing for another label or spec;
// releasing it leaves the store alone. Before a run uses the store,
// Prepare refuses a corrupt image and one another runsc version made.
func TestGoldenStore(t *testing.T) {
	needRunsc(t)
	rootfs := busyboxRootfs(t)
	store := filepath.Join(t.TempDir(), "goldens")
	params := map[string]string{ParamRootfs: rootfs, ParamGoldens: store}
	spec := providers.Spec{Files: map[string][]byte{"f": []byte("x")}}

	a := open(t, params)
	sb := create(t, a, spec)
	sh(t, sb, "od -An -N8 -tx8 /dev/urandom | tr -d ' ' > nonce; (n=$(cat nonce); while :; do echo $n > alive; sleep 0.1; done) >/dev/null 2>&1 &")
	nonce := sh(t, sb, "cat nonce").Text()
	_, err := a.Checkpoint(t.Context(), sb, "task@123")
	require.NoError(t, err)
	ents, err := os.ReadDir(store)
	require.NoError(t, err)
	require.Len(t, ents, 1, "one golden stored")
	key := filepath.Join(store, ents[0].Name())
	require.NoError(t, a.Close(t.Context()))

	b := open(t, params)
	require.NoError(t, b.Prepare(t.Context(), []providers.Spec{spec}, nil))
	cp, ok, err := b.StoredGolden(t.Context(), spec, "task@123")
	require.NoError(t, err)
	require.True(t, ok, "the stored golden is found by a later run")
	require.Equal(t, MethodStored, cp.Method)
	f, err := b.Fork(t.Context(), cp)
	require.NoError(t, err)
	defer f.Close(context.Background())
	require.Equal(t, nonce, sh(t, f, "rm -f alive; i=0; while [ ! -f alive ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; cat alive").Text(),
		"the stored golden's process runs in the fork")
	for name, c := range map[string]struct {
		spec  providers.Spec
		label string
	}{
		"otherLabel": {spec, "task@456"},
		"otherSpec":  {providers.Spec{Files: spec.Files, Resources: providers.Resources{MemoryMB: 256}}, "task@123"},
	} {
		_, ok, err := b.StoredGolden(t.Context(), c.spec, c.label)
		require.NoError(t, err, name)
		require.False(t, ok, "%s: no golden stored", name)
	}
	require.NoError(t, b.Release(t.Context(), cp))
	require.FileExists(t, filepath.Join(key, imageFile), "Release leaves the stored golden")

	t.Run("corrupt", func(t *testing.T) {
		img := filepath.Join(key, imageFile)
		good, err := os.ReadFile(img)
		require.NoError(t, err)
		defer func() { require.NoError(t, os.WriteFile(img, good, 0o600)) }()
		bad := append([]byte(nil), good...)
		bad[len(bad)/2] ^= 0xff
		require.NoError(t, os.Remove(img))
		require.NoError(t, os.WriteFile(img, bad, 0o600))
		err = open(t, params).Prepare(t.Context(), []providers.Spec{spec}, nil)
		require.ErrorIs(t, err, providers.ErrCannotPrepare)
		require.ErrorContains(t, err, "is corrupt")
		require.ErrorContains(t, err, key)
	})
	t.Run("otherRunsc", func(t *testing.T) {
		metaPath := filepath.Join(key, goldenMeta)
		orig, err := os.ReadFile(metaPath)
		require.NoError(t, err)
		defer func() { require.NoError(t, os.WriteFile(metaPath, orig, 0o600)) }()
		var m storedGolden
		require.NoError(t, json.Unmarshal(orig, &m))
		m.RunscVersion = "runsc version 0.0~20990101.0"
		b, err := json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(metaPath, b, 0o600))
		err = open(t, params).Prepare(t.Context(), []providers.Spec{spec}, nil)
		require.ErrorIs(t, err, providers.ErrCannotPrepare)
		require.ErrorContains(t, err, `was made by "runsc version 0.0~20990101.0"`)
		require.True(t, strings.Contains(err.Error(), "restores only its own images"))
	})
	require.NoError(t, open(t, params).Prepare(t.Context(), []providers.Spec{spec}, nil), "the restored store is good again")
}
