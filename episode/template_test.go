package episode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
	_ "github.com/forkline/forkline/providers/browser" // the GUI host Environment wraps with
	"github.com/forkline/forkline/providers/local"
	"github.com/forkline/forkline/task"
)

func TestTemplateCarriesTheTask(t *testing.T) {
	s := task.Spec{ID: "web", Image: "img", Files: map[string]string{"index.html": "<p>"}, Env: map[string]string{"B": "2", "A": "1"},
		Setup: []string{"s"}, Start: []string{"st"}, Limits: task.Limits{OutputCap: 9, CPUs: 1.5, MemoryMB: 64, Pids: 32},
		Browser: &task.Browser{Width: 640, Height: 480, Start: "index.html", Observe: "a11y", LoadTimeout: task.Duration(3 * time.Second)}}
	tmpl, err := Template(&s)
	require.NoError(t, err)
	require.Equal(t, "web@"+s.Hash()[:12], tmpl.Key)
	require.Equal(t, providers.Spec{Image: "img", Files: map[string][]byte{"index.html": []byte("<p>")}, Env: []string{"A=1", "B=2"},
		OutputCap: 9, Resources: providers.Resources{CPUs: 1.5, MemoryMB: 64, Pids: 32}, Labels: map[string]string{TaskLabel: "web"},
		GUI: &providers.GUI{Width: 640, Height: 480, Start: "index.html", A11y: true, LoadTimeout: 3 * time.Second}}, tmpl.Spec)
	require.Equal(t, []string{"s"}, tmpl.Setup)
	require.Equal(t, []string{"st"}, tmpl.Start)

	s.Browser = nil
	tmpl, err = Template(&s)
	require.NoError(t, err)
	require.Nil(t, tmpl.Spec.GUI, "a shell task asks for no GUI")

	s.Browser = &task.Browser{} // browser: {} — every default
	tmpl, err = Template(&s)
	require.NoError(t, err)
	require.Equal(t, &providers.GUI{Screenshots: true, A11y: true}, tmpl.Spec.GUI)
}

func TestEnvironment(t *testing.T) {
	inner, err := local.New(providers.Options{Dir: t.TempDir(), Params: map[string]string{local.ParamFork: local.ForkCopy}})
	require.NoError(t, err)
	defer inner.Close(context.Background())
	shell := task.Spec{ID: "shell"}
	web := task.Spec{ID: "web", Browser: &task.Browser{Start: "index.html"}}

	prov, err := Environment(inner, []task.Spec{shell})
	require.NoError(t, err)
	require.Same(t, inner, prov.(*local.Provider), "no browser task: the provider as it is")

	prov, err = Environment(inner, []task.Spec{shell, web})
	require.NoError(t, err)
	require.True(t, prov.Capabilities().GUI)
	tmpl, err := Template(&web)
	require.NoError(t, err)
	// The GUI travels in the Spec: a sandbox gets its browser whatever its
	// labels say (no task id is looked up), and only when it asks.
	spec := tmpl.Spec
	spec.Labels = nil
	sb, err := prov.Create(context.Background(), spec)
	require.NoError(t, err)
	defer sb.Close(context.Background())
	require.True(t, sb.Info().GUI)
	plain, err := prov.Create(context.Background(), providers.Spec{Labels: map[string]string{TaskLabel: "web"}})
	require.NoError(t, err)
	defer plain.Close(context.Background())
	require.False(t, plain.Info().GUI, "a label naming a browser task does not make a GUI")

	bad := task.Spec{ID: "tiny", Source: "tasks/tiny.yaml:1", Browser: &task.Browser{Width: 10, Height: 10}}
	_, err = Environment(inner, []task.Spec{shell, bad})
	require.ErrorContains(t, err, "episode: task tiny (tasks/tiny.yaml:1)")
	require.ErrorContains(t, err, "viewport 10x10 is out of range")
}
