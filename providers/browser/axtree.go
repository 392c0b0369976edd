package browser

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/domsnapshot"
)

// AXNode is one node of the compact accessibility tree that observations
// carry (as JSON in Observation.AXTree).
type AXNode struct {
	Role  string `json:"role"`
	Name  string `json:"name,omitempty"`
	Value string `json:"value,omitempty"`
	// States lists the node's true boolean states among focused, checked,
	// mixed, selected, expanded, disabled, required, readonly and invalid.
	States []string `json:"states,omitempty"`
	// Bounds is x, y, width, height in viewport CSS pixels (the click
	// space), rounded; absent for nodes without a layout box.
	Bounds   []int     `json:"bounds,omitempty"`
	Children []*AXNode `json:"children,omitempty"`
}

// ParseAXTree reads an Observation.AXTree back.
func ParseAXTree(s string) (*AXNode, error) {
	var n AXNode
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// Find returns the nodes of the tree rooted at n, in document order, for
// which match is true.
func (n *AXNode) Find(match func(*AXNode) bool) []*AXNode {
	var out []*AXNode
	var walk func(*AXNode)
	walk = func(x *AXNode) {
		if match(x) {
			out = append(out, x)
		}
		for _, c := range x.Children {
			walk(c)
		}
	}
	walk(n)
	return out
}

// containerRoles are roles that only group their children; unnamed, they
// are pruned and their children hoisted.
var containerRoles = map[string]bool{
	"generic": true, "none": true, "presentation": true, "LabelText": true, "Section": true, "GenericContainer": true,
}

// stateProps are the boolean AX properties kept as states.
var stateProps = []accessibility.PropertyName{
	accessibility.PropertyNameFocused, accessibility.PropertyNameChecked, accessibility.PropertyNameSelected,
	accessibility.PropertyNameExpanded, accessibility.PropertyNameDisabled, accessibility.PropertyNameRequired,
	accessibility.PropertyNameReadonly, accessibility.PropertyNameInvalid,
}

// layoutBounds maps backend DOM node ids to their layout boxes in viewport
// pixels, from a DOMSnapshot capture of the root document.
func layoutBounds(snap *domsnapshot.CaptureSnapshotResult) map[cdp.BackendNodeID][]int {
	out := map[cdp.BackendNodeID][]int{}
	if snap == nil || len(snap.Documents) == 0 {
		return out
	}
	doc := snap.Documents[0]
	if doc.Nodes == nil || doc.Layout == nil {
		return out
	}
	ids := doc.Nodes.BackendNodeID
	for i, ni := range doc.Layout.NodeIndex {
		if i >= len(doc.Layout.Bounds) || ni < 0 || int(ni) >= len(ids) {
			continue
		}
		r := doc.Layout.Bounds[i]
		if len(r) < 4 {
			continue
		}
		id := ids[ni]
		if _, seen := out[id]; seen {
			continue // the first layout object of a node is its box
		}
		out[id] = []int{int(math.Round(r[0] - doc.ScrollOffsetX)), int(math.Round(r[1] - doc.ScrollOffsetY)),
			int(math.Round(r[2])), int(math.Round(r[3]))}
	}
	return out
}

// compactTree builds the pruned tree from the protocol's flat node list. It
// returns nil when the list has no root.
func compactTree(nodes []*accessibility.Node, bounds map[cdp.BackendNodeID][]int) *AXNode {
	byID := make(map[accessibility.NodeID]*accessibility.Node, len(nodes))
	for _, n := range nodes {
		byID[n.NodeID] = n
	}
	var root *accessibility.Node
	for _, n := range nodes {
		if n.ParentID == "" || byID[n.ParentID] == nil {
			root = n
			break
		}
	}
	if root == nil {
		return nil
	}
	// build returns what n contributes to its parent: itself, or its
	// children when it is pruned. Each node is built once, and depth is
	// bounded, so a malformed list cannot make it loop or blow up.
	visited := make(map[accessibility.NodeID]bool, len(nodes))
	var build func(n *accessibility.Node, depth int) []*AXNode
	build = func(n *accessibility.Node, depth int) []*AXNode {
		if visited[n.NodeID] {
			return nil
		}
		visited[n.NodeID] = true
		var kids []*AXNode
		if depth < 512 {
			for _, id := range n.ChildIDs {
				if c := byID[id]; c != nil {
					kids = append(kids, build(c, depth+1)...)
				}
			}
		}
		role := axString(n.Role)
		if n.Ignored || role == "InlineTextBox" {
			return kids
		}
		x := &AXNode{Role: role, Name: strings.TrimSpace(axString(n.Name)), Value: axString(n.Value), Bounds: bounds[n.BackendDOMNodeID]}
		for _, want := range stateProps {
			for _, p := range n.Properties {
				if p.Name != want || p.Value == nil {
					continue
				}
				switch v := strings.Trim(string(p.Value.Value), `"`); {
				case v == "true":
					x.States = append(x.States, string(want))
				case v == "mixed":
					x.States = append(x.States, "mixed")
				}
			}
		}
		if containerRoles[role] && x.Name == "" && x.Value == "" && len(x.States) == 0 {
			return kids
		}
		x.Children = dropEchoes(x, kids)
		return []*AXNode{x}
	}
	out := build(root, 0)
	if len(out) == 1 {
		return out[0]
	}
	return &AXNode{Role: "RootWebArea", Children: out}
}

// dropEchoes removes static text children that are empty or only repeat the
// name of their parent or of a sibling (a button's text, a label's text
// beside its field).
func dropEchoes(parent *AXNode, kids []*AXNode) []*AXNode {
	names := map[string]bool{}
	if parent.Name != "" {
		names[parent.Name] = true
	}
	for _, k := range kids {
		if k.Role != "StaticText" && k.Name != "" {
			names[k.Name] = true
		}
	}
	out := kids[:0]
	for _, k := range kids {
		if k.Role == "StaticText" && len(k.Children) == 0 && (k.Name == "" || names[k.Name]) {
			continue
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// axString reads an AX value as text: strings unquoted, other JSON as is.
func axString(v *accessibility.Value) string {
	if v == nil || len(v.Value) == 0 {
		return ""
	}
	var s string
	if err := json.Unmarshal([]byte(v.Value), &s); err == nil {
		return s
	}
	return string(bytes.TrimSpace([]byte(v.Value)))
}

// marshalTree is the tree as compact JSON.
func marshalTree(n *AXNode) string {
	if n == nil {
		return ""
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(n); err != nil {
		return ""
	}
	return strings.TrimSuffix(b.String(), "\n")
}
