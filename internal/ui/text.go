package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
)

// writeBlock writes text line by line after indent ("" as "(empty)").
func writeBlock(w io.Writer, indent, text string) {
	text = strings.TrimRight(text, "\n")
	if text == "" {
		text = "(empty)"
	}
	for _, l := range strings.Split(text, "\n") {
		fmt.Fprintf(w, "%s%s\n", indent, l)
	}
}

// writeWrappedList writes items after head, comma-separated, in lines of
// at most 100 columns.
func writeWrappedList(w io.Writer, head string, items []string) {
	line := head
	pad := strings.Repeat(" ", len(head))
	for i, it := range items {
		if i > 0 {
			it = ", " + it
		}
		if len(line)+len(it) > 100 && line != head {
			fmt.Fprintln(w, line+",")
			line = pad + strings.TrimPrefix(it, ", ")
			continue
		}
		line += it
	}
	fmt.Fprintln(w, line)
}

// settings is " (k=v, ...)" sorted by key, "" for none.
func settings(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// orderedExits returns the keys of m in runtime's order of exit reasons,
// unknown ones last.
func orderedExits[V any](m map[string]V) []string {
	var out []string
	for _, e := range runtime.ExitReasons() {
		if _, ok := m[string(e)]; ok {
			out = append(out, string(e))
		}
	}
	for _, k := range sortedKeys(m) {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// exits lists exit reasons in runtime's order, scaffold losses starred,
// unknown ones last (and starred: an unknown reason counts as a loss).
func exits(by map[string]int) string {
	var parts []string
	known := runtime.ExitReasons()
	for _, e := range known {
		if n := by[string(e)]; n > 0 {
			tag := ""
			if e.ScaffoldLoss() {
				tag = "*"
			}
			parts = append(parts, fmt.Sprintf("%s%s=%d", e, tag, n))
		}
	}
	for _, k := range sortedKeys(by) {
		if !slices.Contains(known, runtime.ExitReason(k)) {
			parts = append(parts, fmt.Sprintf("%s*=%d", k, by[k]))
		}
	}
	return strings.Join(parts, " ")
}

// plural is "1 task", "2 tasks".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func fmtMean(v *float64) string {
	if v == nil {
		return "-"
	}
	return num(*v)
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// bar is n of most as up to 40 #s (at least one for n > 0).
func bar(n, most int) string {
	if most == 0 {
		return ""
	}
	return strings.Repeat("#", (n*40+most-1)/most)
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// thousands writes n with a comma every three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func sortedKeys[K interface{ ~string | ~float64 }, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}

// conversationSettings are a recorded conversation's settings as key=value,
// sorted by key, whatever their JSON type: strings as they are (a long or
// multi-line one as its length), lists of strings comma-joined, anything
// else as its JSON.
func conversationSettings(c policy.Conversation) []string {
	b, err := json.Marshal(c)
	if err != nil {
		return []string{"(unreadable: " + err.Error() + ")"}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return []string{"(unreadable: " + err.Error() + ")"}
	}
	// What the model was shown of GUI observations, also where a manifest
	// that predates the field left it out (text).
	fields["observe"], _ = json.Marshal(c.Shows())
	var parts []string
	for _, k := range sortedKeys(fields) {
		raw := fields[k]
		var v string
		var list []string
		switch {
		case json.Unmarshal(raw, &v) == nil:
			if len(v) > 60 || strings.Contains(v, "\n") {
				v = fmt.Sprintf("(%d bytes)", len(v))
			}
		case json.Unmarshal(raw, &list) == nil:
			v = strings.Join(list, ",")
		default:
			v = string(raw)
		}
		parts = append(parts, k+"="+v)
	}
	return parts
}
