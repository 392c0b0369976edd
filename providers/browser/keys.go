package browser

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp/kb"
)

// keyPress is one key of a key action with the modifiers held while it is
// pressed.
type keyPress struct {
	key       *kb.Key
	modifiers kb.Modifier
}

// modifierKeys maps the modifier names a key action accepts to their bits.
var modifierKeys = map[string]kb.Modifier{
	"control": kb.ModifierCtrl, "ctrl": kb.ModifierCtrl,
	"shift": kb.ModifierShift,
	"alt":   kb.ModifierAlt, "option": kb.ModifierAlt,
	"meta": kb.ModifierMeta, "cmd": kb.ModifierMeta, "command": kb.ModifierMeta, "super": kb.ModifierMeta,
}

// namedKeys maps lower-case DOM key names ("enter", "arrowdown") and a few
// common aliases to chromedp's key definitions.
var namedKeys = func() map[string]*kb.Key {
	m := map[string]*kb.Key{}
	for _, k := range kb.Keys {
		if utf8.RuneCountInString(k.Key) > 1 {
			m[strings.ToLower(k.Key)] = k
		}
	}
	for alias, name := range map[string]string{
		"esc": "escape", "return": "enter", "del": "delete", "up": "arrowup", "down": "arrowdown",
		"left": "arrowleft", "right": "arrowright", "pgup": "pageup", "pgdn": "pagedown",
	} {
		if k, ok := m[name]; ok {
			m[alias] = k
		}
	}
	m["space"] = kb.Keys[' ']
	return m
}()

// parseKeys reads a key action's keys: one or more presses separated by
// spaces, each a key with optional modifiers joined by '+', e.g. "Enter",
// "Control+a", "Shift+Tab", "Tab Tab Enter". Key and modifier names are
// case-insensitive except single characters, which are typed as given.
func parseKeys(s string) ([]keyPress, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, fmt.Errorf("no keys in %q", s)
	}
	var out []keyPress
	for _, f := range fields {
		parts := strings.Split(f, "+")
		// "Control++" presses the plus key.
		if strings.HasSuffix(f, "++") {
			parts = append(strings.Split(strings.TrimSuffix(f, "++"), "+"), "+")
		}
		var p keyPress
		for i, part := range parts {
			if i < len(parts)-1 {
				m, ok := modifierKeys[strings.ToLower(part)]
				if !ok {
					return nil, fmt.Errorf("%q in %q is not a modifier (known: Alt, Control, Meta, Shift)", part, f)
				}
				p.modifiers |= m
				continue
			}
			k, err := lookupKey(part)
			if err != nil {
				return nil, err
			}
			p.key = k
		}
		out = append(out, p)
	}
	return out, nil
}

func lookupKey(name string) (*kb.Key, error) {
	if utf8.RuneCountInString(name) == 1 {
		r, _ := utf8.DecodeRuneInString(name)
		if k, ok := kb.Keys[r]; ok {
			return k, nil
		}
		return &kb.Key{Key: name, Text: name, Unmodified: name, Print: true}, nil
	}
	if k, ok := namedKeys[strings.ToLower(name)]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("%q is not a key name (e.g. Enter, Tab, Escape, Backspace, ArrowDown, PageDown, Space, or one character)", name)
}

// events returns the protocol events of one press: modifier downs, the key
// down (with text only when no modifier but Shift is held, so that
// Control+a selects instead of typing), the key up, modifier ups.
func (p keyPress) events() []input.DispatchKeyEventParams {
	var evs []input.DispatchKeyEventParams
	mods := []struct {
		bit  kb.Modifier
		key  string
		code string
		vk   int64
	}{
		{kb.ModifierCtrl, "Control", "ControlLeft", 17},
		{kb.ModifierShift, "Shift", "ShiftLeft", 16},
		{kb.ModifierAlt, "Alt", "AltLeft", 18},
		{kb.ModifierMeta, "Meta", "MetaLeft", 91},
	}
	held := kb.ModifierNone
	for _, m := range mods {
		if p.modifiers&m.bit != 0 {
			held |= m.bit
			evs = append(evs, input.DispatchKeyEventParams{Type: kb.KeyRawDown, Key: m.key, Code: m.code,
				WindowsVirtualKeyCode: m.vk, NativeVirtualKeyCode: m.vk, Modifiers: held.Int64()})
		}
	}
	k := p.key
	mods64 := p.modifiers.Int64()
	if k.Shift {
		mods64 |= kb.ModifierShift.Int64()
	}
	down := input.DispatchKeyEventParams{Type: kb.KeyDown, Key: k.Key, Code: k.Code,
		WindowsVirtualKeyCode: k.Windows, NativeVirtualKeyCode: k.Native, Modifiers: mods64}
	typesText := k.Print && p.modifiers&^kb.ModifierShift == 0
	if typesText {
		down.Text, down.UnmodifiedText = k.Text, k.Unmodified
	} else {
		down.Type = kb.KeyRawDown
	}
	evs = append(evs, down)
	up := down
	up.Type, up.Text, up.UnmodifiedText = kb.KeyUp, "", ""
	evs = append(evs, up)
	for i := len(mods) - 1; i >= 0; i-- {
		m := mods[i]
		if p.modifiers&m.bit != 0 {
			held &^= m.bit
			evs = append(evs, input.DispatchKeyEventParams{Type: kb.KeyUp, Key: m.key, Code: m.code,
				WindowsVirtualKeyCode: m.vk, NativeVirtualKeyCode: m.vk, Modifiers: held.Int64()})
		}
	}
	return evs
}
