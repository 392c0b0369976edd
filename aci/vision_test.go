package aci

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/runtime"
)

// TestObservationShown: text mode reads as it always did; the image modes
// drop the "text only" note and say where the image is; a11y shows the
// tree as compact text with boxes in the screenshot's pixels.
func TestObservationShown(t *testing.T) {
	step := runtime.Step{Action: runtime.Action{Kind: runtime.ActClick, X: 1, Y: 2}, Observation: runtime.Observation{
		Output: []byte("url: a.html\ntitle: A\n"), ExitCode: -1, Screenshot: &runtime.Screenshot{Width: 800, Height: 600},
		AXTree: `{"role":"RootWebArea","name":"A","children":[{"role":"textbox","name":"Name","value":"Ada","states":["focused"],"bounds":[40,94,400,32]}]}`,
	}}
	require.Equal(t, Shown{Text: ObservationText(step, 0)}, ObservationShown(step, 0, ObserveText))
	require.Contains(t, ObservationText(step, 0), "this policy sends text only")

	shot := ObservationShown(step, 0, ObserveScreenshot)
	require.Equal(t, Shown{Text: "url: a.html\ntitle: A\n", Image: true}, shot)

	tree := ObservationShown(step, 0, ObserveA11y)
	require.False(t, tree.Image)
	require.Equal(t, "[forkline: a 800x600 screenshot was taken; this run shows the accessibility tree, not images]\nurl: a.html\ntitle: A\n"+
		"accessibility tree:\nRootWebArea \"A\"\n  textbox \"Name\" value=\"Ada\" [focused] box=40,94,400,32\n", tree.Text)

	both := ObservationShown(step, 0, ObserveBoth)
	require.True(t, both.Image)
	require.Contains(t, both.Text, "accessibility tree:\n")

	require.Equal(t, Shown{}, StartShown(step.Observation, ObserveText), "a text run's first message is the instruction")
	require.Equal(t, "not json\n", TreeText("not json"))
}

func TestKeptImagesAndNotes(t *testing.T) {
	kept := KeptImages(5, 2)
	var got []bool
	for i := range 5 {
		got = append(got, kept(i))
	}
	require.Equal(t, []bool{false, false, false, true, true}, got)
	require.True(t, KeptImages(5, 0)(0), "0 keeps all")
	require.Equal(t, "a\n[n]", WithNote("a", "[n]"))
	require.Equal(t, "a\n[n]", WithNote("a\n", "[n]"))
	require.Equal(t, "[n]", WithNote("", "[n]"))
	_, err := ParseObserve("pixels")
	require.ErrorContains(t, err, "known: text, screenshot, a11y, both")
}
