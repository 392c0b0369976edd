package collect

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/providers"

	_ "github.com/forkline/forkline/providers/docker"
)

// knownParams asks a registered provider which settings it accepts: every
// backend refuses an unknown one listing the known ones (providers.CheckParams),
// before it touches anything.
func knownParams(t *testing.T, name string) []string {
	t.Helper()
	_, err := providers.Open(name, providers.Options{Dir: t.TempDir(), Params: map[string]string{"zz-probe": "x"}})
	require.Error(t, err)
	m := regexp.MustCompile(`\(known: ([^)]*)\)`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, "%s: %v", name, err)
	return strings.Split(m[1], ", ")
}

// Every setting of the providers the resume check knows is classified as
// shaping a sandbox or not, so a new setting cannot slip through as
// harmless (an unlisted one counts as shaping, but the decision belongs in
// the table, with its reason).
func TestEveryProviderSettingIsClassified(t *testing.T) {
	for name, table := range providerParamShapes {
		known := knownParams(t, name)
		var listed []string
		for k := range table {
			listed = append(listed, k)
		}
		sort.Strings(listed)
		sort.Strings(known)
		require.Equal(t, known, listed, "provider %s: classify every setting in providerParamShapes", name)
	}
	require.True(t, shapes(providerParamShapes, "docker", "image"))
	require.False(t, shapes(providerParamShapes, "docker", "standby"))
	require.True(t, shapes(providerParamShapes, "someone-elses", "anything"), "unknown settings shape, to be safe")
}

func TestEveryOpenAIOptionIsClassified(t *testing.T) {
	var listed []string
	for k := range policyOptionShapes["openai"] {
		listed = append(listed, k)
	}
	sort.Strings(listed)
	require.Equal(t, openai.OptionNames(), listed, "classify every openai option in policyOptionShapes")
}

// The capture mismatch says both policies, the run's and this command's.
func TestCaptureMismatchShowsBothPolicies(t *testing.T) {
	cfg := baseConfig(t, "../examples/tasks/fix-sum.yaml")
	_, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	cfg.Resume = true
	cfg.Capture.Pixels, cfg.Capture.A11y, cfg.Capture.Tokens = "none", "full", "keep"
	_, err = Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrIncompatibleResume)
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, `the run used {"text":"full","pixels":"hash","a11y":"full","tokens":"keep"}`)
	require.ErrorContains(t, err, `this command gives {"text":"full","pixels":"none","a11y":"full","tokens":"keep"}`)
}

// TestResumeRefusesACapturePolicyItCannotRead: the manifest's capture entry
// is read by capture's one decoder; an entry with a field this build does
// not know is a difference, named, not a match by omission.
func TestResumeRefusesACapturePolicyItCannotRead(t *testing.T) {
	cfg := baseConfig(t, "../examples/tasks/fix-sum.yaml")
	_, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	path := filepath.Join(cfg.Out, "manifest.json")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	m["capture"].(map[string]any)["video"] = "none"
	raw, err = json.MarshalIndent(m, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	cfg.Resume = true
	_, err = Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrIncompatibleResume)
	require.ErrorContains(t, err, `capture policy: the run's entry`)
	require.ErrorContains(t, err, `unknown field "video"`)
}
