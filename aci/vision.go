package aci

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/forkline/forkline/runtime"
)

// Observe is what a model is shown of a GUI observation: text only (the
// page's url and title, as before there were VLM policies), the
// screenshot as an image, the accessibility tree as compact text, or both.
// Policies and exporters share it, so a VLM data set holds the images and
// trees where the model saw them.
type Observe string

// The observe modes.
const (
	ObserveText       Observe = "text"
	ObserveScreenshot Observe = "screenshot"
	ObserveA11y       Observe = "a11y"
	ObserveBoth       Observe = "both"
)

// ObserveModes lists the observe modes.
func ObserveModes() []Observe {
	return []Observe{ObserveText, ObserveScreenshot, ObserveA11y, ObserveBoth}
}

// ParseObserve reads an observe mode; "" is ObserveText.
func ParseObserve(s string) (Observe, error) {
	if s == "" {
		return ObserveText, nil
	}
	for _, m := range ObserveModes() {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("aci: observe %q is not known (known: text, screenshot, a11y, both)", s)
}

// Images reports whether screenshots are shown as images.
func (m Observe) Images() bool { return m == ObserveScreenshot || m == ObserveBoth }

// Tree reports whether accessibility trees are shown as text.
func (m Observe) Tree() bool { return m == ObserveA11y || m == ObserveBoth }

// Shown is what a model is shown of one observation: its text, and
// whether the observation's screenshot follows it as an image.
type Shown struct {
	Text  string
	Image bool
}

// ObservationShown is what a model is shown of one step's result under
// mode m: ObservationText's text for ObserveText (byte for byte, so text
// runs read as they always did); otherwise the same text without the
// "text only" note, the accessibility tree after it when m shows trees
// (TreeText, after a line "accessibility tree:"), and the screenshot as an
// image when m shows images. A step whose screenshot is not shown says so
// in a note, as in text mode.
func ObservationShown(s runtime.Step, limit int, m Observe) Shown {
	if m == "" || m == ObserveText {
		return Shown{Text: ObservationText(s, limit)}
	}
	return shown(observationText(s, limit, m), s.Observation, m)
}

// StartShown is what a model is shown of an episode's first observation
// (runtime.History.Start) under mode m, as a block that follows the
// instruction in the first user message: "the start page:" then the page's
// text, tree and image as ObservationShown shows a step's. In ObserveText
// the start is not shown (a text run's first message is the instruction,
// as it always was).
func StartShown(o runtime.Observation, m Observe) Shown {
	if m == "" || m == ObserveText {
		return Shown{}
	}
	var b strings.Builder
	b.WriteString("[forkline: the start page]\n")
	b.WriteString(o.Text())
	if o.Screenshot != nil && !m.Images() {
		fmt.Fprintf(&b, "[forkline: a %dx%d screenshot was taken; this run shows the accessibility tree, not images]\n", o.Screenshot.Width, o.Screenshot.Height)
	}
	return shown(b.String(), o, m)
}

func shown(text string, o runtime.Observation, m Observe) Shown {
	out := Shown{Text: text}
	if m.Tree() && o.AXTree != "" {
		if out.Text != "" && !strings.HasSuffix(out.Text, "\n") {
			out.Text += "\n"
		}
		out.Text += "accessibility tree:\n" + TreeText(o.AXTree)
	}
	out.Image = m.Images() && o.Screenshot != nil
	return out
}

// observationText is ObservationText for the modes that show images or
// trees: the screenshot note says what the run shows instead.
func observationText(s runtime.Step, limit int, m Observe) string {
	shot := s.Observation.Screenshot
	s.Observation.Screenshot = nil
	text := ObservationText(s, limit)
	if shot != nil && !m.Images() {
		note := fmt.Sprintf("[forkline: a %dx%d screenshot was taken; this run shows the accessibility tree, not images]\n", shot.Width, shot.Height)
		return insertNote(s, text, note)
	}
	return text
}

// insertNote puts note where ObservationText puts its screenshot note:
// after the exit code and error lines, before the output.
func insertNote(s runtime.Step, text, note string) string {
	head := 0
	for _, prefix := range []string{"exit code: ", "[forkline: the action timed out", "error: "} {
		if strings.HasPrefix(text[head:], prefix) {
			if nl := strings.IndexByte(text[head:], '\n'); nl >= 0 {
				head += nl + 1
			}
		}
	}
	return text[:head] + note + text[head:]
}

// ImageNote is the text that stands for a screenshot no longer shown
// because only the last max images stay in the context (a policy's
// max_images): a short note in place of the image, the same in the
// policy's requests and in exports.
func ImageNote(width, height, max int) string {
	return fmt.Sprintf("[forkline: an earlier %dx%d screenshot, no longer shown (only the last %d are kept)]", width, height, max)
}

// WithNote is text with note on a line of its own after it.
func WithNote(text, note string) string {
	switch {
	case text == "":
		return note
	case strings.HasSuffix(text, "\n"):
		return text + note
	}
	return text + "\n" + note
}

// ImageCaption is the text of the user message that carries a step's
// screenshot after its tool result in native tool mode (a tool message
// holds text only in OpenAI's chat format).
const ImageCaption = "[forkline: the screenshot after the action]"

// KeptImages says which of n images, in conversation order, stay images
// when at most max are kept (0 keeps all): the last max.
func KeptImages(n, max int) func(i int) bool {
	first := 0
	if max > 0 && n > max {
		first = n - max
	}
	return func(i int) bool { return i >= first }
}

// axNode is the compact accessibility tree's JSON (providers/browser
// writes it; AXTree in an observation).
type axNode struct {
	Role     string    `json:"role"`
	Name     string    `json:"name"`
	Value    string    `json:"value"`
	States   []string  `json:"states"`
	Bounds   []int     `json:"bounds"`
	Children []*axNode `json:"children"`
}

// TreeText writes an accessibility tree (the compact JSON of
// Observation.AXTree) as indented text a model reads cheaply, one node a
// line:
//
//	role "name" value="..." [state, ...] box=x,y,w,h
//
// where box is the node's layout box in the screenshot's pixel space (the
// click space: its centre is x+w/2, y+h/2). A tree that is not that JSON
// is shown as it is.
func TreeText(tree string) string {
	var root axNode
	if err := json.Unmarshal([]byte(tree), &root); err != nil {
		return tree + "\n"
	}
	var b strings.Builder
	var walk func(n *axNode, depth int)
	walk = func(n *axNode, depth int) {
		b.WriteString(strings.Repeat("  ", depth))
		b.WriteString(n.Role)
		if n.Name != "" {
			fmt.Fprintf(&b, " %q", n.Name)
		}
		if n.Value != "" {
			fmt.Fprintf(&b, " value=%q", n.Value)
		}
		if len(n.States) > 0 {
			fmt.Fprintf(&b, " [%s]", strings.Join(n.States, ", "))
		}
		if len(n.Bounds) == 4 {
			fmt.Fprintf(&b, " box=%d,%d,%d,%d", n.Bounds[0], n.Bounds[1], n.Bounds[2], n.Bounds[3])
		}
		b.WriteByte('\n')
		for _, c := range n.Children {
			if c != nil {
				walk(c, depth+1)
			}
		}
	}
	walk(&root, 0)
	return b.String()
}
