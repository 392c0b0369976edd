package browser

import (
	"encoding/json"
	"testing"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/domsnapshot"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"
)

func TestResolveURL(t *testing.T) {
	const ws = "/tmp/w s"
	cases := []struct {
		name, in, want, refused string
	}{
		{"relative", "index.html", "file:///tmp/w%20s/index.html", ""},
		{"query and fragment", "app/list.html?q=a b#top", "file:///tmp/w%20s/app/list.html?q=a b#top", ""},
		{"dot segments inside", "a/../b.html", "file:///tmp/w%20s/b.html", ""},
		{"escape", "../etc/passwd", "", "leaves the workspace"},
		{"absolute path", "/etc/passwd", "", "absolute path"},
		{"file inside", "file:///tmp/w%20s/x.html", "file:///tmp/w%20s/x.html", ""},
		{"file outside", "file:///etc/passwd", "", "outside the workspace"},
		{"file sneaking out", "file:///tmp/w%20s/../x", "", "outside the workspace"},
		{"file prefix twin", "file:///tmp/w%20sx/y", "", "outside the workspace"},
		{"loopback", "http://127.0.0.1:8080/a", "http://127.0.0.1:8080/a", ""},
		{"localhost", "https://localhost/", "https://localhost/", ""},
		{"ipv6 loopback", "http://[::1]:9/", "http://[::1]:9/", ""},
		{"other loopback address", "http://127.0.0.2/", "", "not loopback"},
		{"internet", "https://example.com/", "", "not loopback"},
		{"about:blank", "about:blank", "about:blank", ""},
		{"other about", "about:settings", "", "not allowed"},
		{"data", "data:text/html,<p>hi</p>", "data:text/html,<p>hi</p>", ""},
		{"javascript", "javascript:alert(1)", "", "not allowed"},
		{"chrome", "chrome://version", "", "not allowed"},
		{"empty", " ", "", "empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u, refused := resolveURL(c.in, ws)
			if c.refused != "" {
				require.Contains(t, refused, c.refused)
				require.Empty(t, u)
				return
			}
			require.Empty(t, refused)
			require.Equal(t, c.want, u)
		})
	}
}

func TestDisplayURL(t *testing.T) {
	const ws = "/tmp/w s"
	require.Equal(t, "index.html", displayURL("file:///tmp/w%20s/index.html", ws))
	require.Equal(t, "done.html?name=Ada+L&x=%40#a%20b", displayURL("file:///tmp/w%20s/done.html?name=Ada+L&x=%40#a%20b", ws))
	require.Equal(t, "file:///etc/passwd", displayURL("file:///etc/passwd", ws))
	require.Equal(t, "http://127.0.0.1:9/", displayURL("http://127.0.0.1:9/", ws))
	require.Equal(t, "chrome-error://chromewebdata/", displayURL("chrome-error://chromewebdata/", ws))
}

func TestParseKeys(t *testing.T) {
	cases := []struct {
		in   string
		want []string // key names
		mods []kb.Modifier
		err  string
	}{
		{in: "Enter", want: []string{"Enter"}, mods: []kb.Modifier{0}},
		{in: "enter", want: []string{"Enter"}, mods: []kb.Modifier{0}},
		{in: "Control+a", want: []string{"a"}, mods: []kb.Modifier{kb.ModifierCtrl}},
		{in: "ctrl+shift+Tab", want: []string{"Tab"}, mods: []kb.Modifier{kb.ModifierCtrl | kb.ModifierShift}},
		{in: "Tab Tab Esc", want: []string{"Tab", "Tab", "Escape"}, mods: []kb.Modifier{0, 0, 0}},
		{in: "Control++", want: []string{"+"}, mods: []kb.Modifier{kb.ModifierCtrl}},
		{in: "Space", want: []string{" "}, mods: []kb.Modifier{0}},
		{in: "PageDown", want: []string{"PageDown"}, mods: []kb.Modifier{0}},
		{in: "é", want: []string{"é"}, mods: []kb.Modifier{0}},
		{in: "Hyperdrive", err: `"Hyperdrive" is not a key name`},
		{in: "Win+a", err: `"Win" in "Win+a" is not a modifier`},
		{in: "  ", err: "no keys"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := parseKeys(c.in)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Len(t, got, len(c.want))
			for i, p := range got {
				require.Equal(t, c.want[i], p.key.Key)
				require.Equal(t, c.mods[i], p.modifiers)
			}
		})
	}
}

func TestKeyEvents(t *testing.T) {
	p, err := parseKeys("Control+a")
	require.NoError(t, err)
	evs := p[0].events()
	types := []input.DispatchKeyEventType{}
	for _, e := range evs {
		types = append(types, e.Type)
	}
	require.Equal(t, []input.DispatchKeyEventType{kb.KeyRawDown, kb.KeyRawDown, kb.KeyUp, kb.KeyUp}, types)
	require.Empty(t, evs[1].Text, "a chord types nothing")
	require.EqualValues(t, kb.ModifierCtrl, evs[1].Modifiers)
	require.Zero(t, evs[3].Modifiers, "all released")

	p, err = parseKeys("Shift+a")
	require.NoError(t, err)
	evs = p[0].events()
	require.Equal(t, kb.KeyDown, evs[1].Type)
	require.Equal(t, "a", evs[1].Text, "Shift alone still types (the page sees the key it got)")

	p, err = parseKeys("Enter")
	require.NoError(t, err)
	evs = p[0].events()
	require.Len(t, evs, 2)
	require.Equal(t, "\r", evs[0].Text)
}

// axFixture is a flat AX node list as getFullAXTree returns it for a small
// form: <label>Name <input value=Ada></label><button>Save</button>, with the
// usual ignored wrappers and inline text boxes.
func axFixture() []*accessibility.Node {
	str := func(s string) *accessibility.Value {
		b, _ := json.Marshal(s)
		return &accessibility.Value{Type: accessibility.ValueTypeString, Value: b}
	}
	role := func(s string) *accessibility.Value {
		b, _ := json.Marshal(s)
		return &accessibility.Value{Type: accessibility.ValueTypeRole, Value: b}
	}
	boolProp := func(name accessibility.PropertyName, v string) *accessibility.Property {
		return &accessibility.Property{Name: name, Value: &accessibility.Value{Type: accessibility.ValueTypeBoolean, Value: []byte(v)}}
	}
	return []*accessibility.Node{
		{NodeID: "1", Role: role("RootWebArea"), Name: str("Sign up"), ChildIDs: []accessibility.NodeID{"2"}, BackendDOMNodeID: 1},
		{NodeID: "2", Ignored: true, Role: role("none"), ParentID: "1", ChildIDs: []accessibility.NodeID{"3"}},
		{NodeID: "3", Role: role("generic"), ParentID: "2", ChildIDs: []accessibility.NodeID{"4", "8"}, BackendDOMNodeID: 3},
		{NodeID: "4", Role: role("LabelText"), ParentID: "3", ChildIDs: []accessibility.NodeID{"5", "6"}},
		{NodeID: "5", Role: role("StaticText"), Name: str("Name "), ParentID: "4", ChildIDs: []accessibility.NodeID{"-9"}},
		{NodeID: "-9", Role: role("InlineTextBox"), Name: str("Name "), ParentID: "5"},
		{NodeID: "6", Role: role("textbox"), Name: str("Name"), Value: str("Ada"), ParentID: "4", ChildIDs: []accessibility.NodeID{"7"},
			BackendDOMNodeID: 6, Properties: []*accessibility.Property{boolProp("focused", "true"), boolProp("required", "false")}},
		{NodeID: "7", Role: role("generic"), ParentID: "6"},
		{NodeID: "8", Role: role("button"), Name: str("Save"), ParentID: "3", ChildIDs: []accessibility.NodeID{"10"}, BackendDOMNodeID: 8},
		{NodeID: "10", Role: role("StaticText"), Name: str("Save"), ParentID: "8"},
	}
}

func TestCompactTree(t *testing.T) {
	snap := &domsnapshot.CaptureSnapshotResult{Documents: []*domsnapshot.DocumentSnapshot{{
		Nodes:         &domsnapshot.NodeTreeSnapshot{BackendNodeID: []cdp.BackendNodeID{1, 3, 6, 8}},
		Layout:        &domsnapshot.LayoutTreeSnapshot{NodeIndex: []int64{0, 2, 2, 3}, Bounds: []domsnapshot.Rectangle{{0, 0, 800, 600}, {40.4, 94, 400, 32}, {1, 1, 1, 1}, {40, 260.6, 200, 40}}},
		ScrollOffsetY: 50,
	}}}
	tree := compactTree(axFixture(), layoutBounds(snap))
	got := marshalTree(tree)
	require.Equal(t, `{"role":"RootWebArea","name":"Sign up","bounds":[0,-50,800,600],"children":[`+
		`{"role":"textbox","name":"Name","value":"Ada","states":["focused"],"bounds":[40,44,400,32]},`+
		`{"role":"button","name":"Save","bounds":[40,211,200,40]}]}`, got)
	back, err := ParseAXTree(got)
	require.NoError(t, err)
	require.Equal(t, tree, back)
	require.Len(t, back.Find(func(n *AXNode) bool { return n.Role == "textbox" }), 1)
	require.Nil(t, compactTree(nil, nil))
	require.Equal(t, "", marshalTree(nil))
}

func TestCompactTreeSurvivesCycles(t *testing.T) {
	nodes := axFixture()
	nodes[8].ChildIDs = append(nodes[8].ChildIDs, "3") // the button claims its grandparent
	require.NotPanics(t, func() { compactTree(nodes, nil) })
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	c := DefaultConfig()
	c.Width, c.Start, c.LoadTimeout = 10, "https://example.com", 0
	err := c.Validate()
	require.ErrorContains(t, err, "viewport 10x800")
	require.ErrorContains(t, err, "not loopback")
	require.ErrorContains(t, err, "load timeout")
	for _, m := range ObserveModes {
		_, _, err := ParseObserve(m)
		require.NoError(t, err)
	}
	_, _, err = ParseObserve("video")
	require.ErrorContains(t, err, `observe "video" is not known`)
}
