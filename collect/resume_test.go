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

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/providers"

	_ "github.com/forkline/forkline/providers/all"
)

// knownParams asks a registered provider which settings it accepts: every
// backend refuses an unknown one listing the known ones (providers.CheckParams),
// before it touches anything.
func knownParams(t *testing.T, name string) []string {
	t.Helper()
	_, err := providers.Open(t.Context(), name, providers.Options{Dir: t.TempDir(), Params: map[string]string{"zz-probe": "x"}})
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
	require.True(t, providerSettingShapes("docker", "image"))
	require.False(t, providerSettingShapes("docker", "sweep"))
	require.True(t, providerSettingShapes("someone-elses", "anything"), "unknown settings shape, to be safe")
	for name, retired := range retiredProviderParams {
		known := knownParams(t, name)
		for k := range retired {
			require.NotContains(t, known, k, "provider %s still accepts %s: it is not retired", name, k)
		}
	}
}

// A run collected with docker's retired standby setting still resumes: the
// manifest has standby=2, this command cannot pass it, and the setting only
// changed timing.
func TestResumeOfARunWithARetiredSetting(t *testing.T) {
	m := shard.Manifest{Tasks: json.RawMessage(`[]`), Provider: json.RawMessage(`{"name":"docker","params":{"image":"forkline/busybox","standby":"2"}}`)}
	cfg := Config{Provider: "docker", ProviderParams: map[string]string{"image": "forkline/busybox"}, Part: Whole, Repeats: 1}
	require.NoError(t, compatible(m, nil, cfg, manifest.Policy{}))
	cfg.ProviderParams["image"] = "forkline/debian"
	err := compatible(m, nil, cfg, manifest.Policy{})
	require.ErrorIs(t, err, ErrIncompatibleResume, "a shaping setting still refuses")
	require.NotContains(t, err.Error(), "standby")
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
	require.ErrorContains(t, err, `capture: the run used {"a11y":"full"`)
	require.ErrorContains(t, err, `the run's entry is unreadable`)
	require.ErrorContains(t, err, `unknown field "video"`)
}

// A run collected before the policy record was typed (its conversation all
// strings: manifest/testdata holds such a manifest, from commit e227819)
// resumes with the same settings, and a setting that changes what the
// model is shown is still refused by name.
func TestResumeComparesAnOldFormPolicyRecord(t *testing.T) {
	raw, err := os.ReadFile("../manifest/testdata/manifest-e227819-openai.json")
	require.NoError(t, err)
	var m shard.Manifest
	require.NoError(t, json.Unmarshal(raw, &m))
	m.Tasks = json.RawMessage(`[]`) // the task is not what this test compares

	prompt := filepath.Join(t.TempDir(), "system.txt")
	require.NoError(t, os.WriteFile(prompt, []byte("You fix shell tasks.\nTools:\n{{tools}}\n"), 0o644))
	t.Setenv("FORKLINE_E2E_KEY", "k")
	cfg := Config{Provider: "local", Policy: "openai", Repeats: 1, Part: Whole, Capture: capture.DefaultPolicy(), Out: "run",
		PolicyOptions: map[string]string{"base_url": "http://127.0.0.1:8000/v1", "model": "Qwen/Qwen3-8B", "api_key_env": "FORKLINE_E2E_KEY",
			"tool_mode": "text", "actions": "exec,write_file,done", "observation_cap": "4096", "system_prompt_file": prompt, "temperature": "0.7"}}
	check := func(cfg Config) error {
		t.Helper()
		_, rec, err := openPolicy(cfg, nil, nil, nil)
		require.NoError(t, err)
		return compatible(m, nil, cfg, rec)
	}
	// The same settings no longer make the same conversation: that run's
	// policy sent the tools with sorted keys (in its system prompt, in text
	// mode) and knew no token modes, so its episodes and this command's
	// would differ in what the model is shown. The resume is refused, each
	// difference named, rather than finishing the run with other prompts.
	err = check(cfg)
	require.ErrorIs(t, err, ErrIncompatibleResume)
	require.ErrorContains(t, err, "the conversation's tool_key_order differs")
	require.ErrorContains(t, err, "the conversation's system_prompt differs")

	require.NoError(t, os.WriteFile(prompt, []byte("You fix other tasks.\n{{tools}}\n"), 0o644))
	err = check(cfg)
	require.ErrorIs(t, err, ErrIncompatibleResume)
	require.ErrorContains(t, err, "the conversation's system_prompt differs")
	require.NotContains(t, err.Error(), "observation_cap", "only what differs is named")
}
