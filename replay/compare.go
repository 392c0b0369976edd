package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// comparer watches the replay's steps (a StepSink beside the episode's
// capture sink): it compares each new step with the recorded one and
// remembers the first difference.
type comparer struct {
	cfg     Config
	capture capture.Policy // the recording's, with pixels none
	rec     []schemas.StepRow
	blob    func(sha256 string) ([]byte, error) // resolves recorded screenshots stored by hash
	seen    int
	matched int
	first   *StepDiff
}

func (c *comparer) WriteStep(_ context.Context, s runtime.Step) error {
	c.seen++
	if c.first != nil || s.Index >= len(c.rec) {
		return nil
	}
	// Convert through the capture policy the recording used, so both sides
	// are compared in the same form (a capped recording against the same
	// cap); screenshots are compared below, from the observation itself.
	now, _ := c.capture.Row("", "", s, nil)
	was := c.rec[s.Index]
	if d := c.diff(s, was, now); d != nil {
		c.first = d
		return nil
	}
	c.matched++
	return nil
}

func (c *comparer) diff(s runtime.Step, was, now schemas.StepRow) *StepDiff {
	d := &StepDiff{Step: s.Index, Action: s.Action.String()}
	switch {
	case was.ExitCode != now.ExitCode:
		d.Field, d.Recorded, d.Replayed = "exit_code", fmt.Sprint(was.ExitCode), fmt.Sprint(now.ExitCode)
	case was.IsError != now.IsError:
		d.Field, d.Recorded, d.Replayed = "is_error", fmt.Sprint(was.IsError), fmt.Sprint(now.IsError)
	case was.TimedOut != now.TimedOut:
		d.Field, d.Recorded, d.Replayed = "timed_out", fmt.Sprint(was.TimedOut), fmt.Sprint(now.TimedOut)
	}
	if d.Field == "" && was.ScreenHash != now.ScreenHash {
		c.screenshotDiff(d, s, was, now)
	}
	if d.Field != "" {
		d.Diff = fmt.Sprintf("%s: recorded %s, replayed %s", d.Field, d.Recorded, d.Replayed)
		return d
	}
	a, b := outputOf(was), outputOf(now)
	switch c.cfg.Mode {
	case Hash:
		ha, hb := digest(a), digest(b)
		if ha != hb {
			d.Field, d.Recorded, d.Replayed = "output", ha, hb
			d.Diff = "output sha256 differs: recorded " + ha + ", replayed " + hb
			return d
		}
		return nil
	case Normalized:
		a, b = normalize(a, c.cfg.Masks), normalize(b, c.cfg.Masks)
	}
	if a != b {
		d.Field, d.Recorded, d.Replayed = "output", a, b
		d.Diff = lineDiff(a, b)
		return d
	}
	return nil
}

func outputOf(r schemas.StepRow) string {
	if r.OutputRaw != nil {
		return string(r.OutputRaw)
	}
	return r.Output
}

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

var ansiRE = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07`)

// normalize strips ANSI escapes and trailing whitespace per line and applies
// the masks, in order.
func normalize(s string, masks []Mask) string {
	s = ansiRE.ReplaceAllString(s, "")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	s = strings.TrimRight(strings.Join(lines, "\n"), "\n")
	for _, m := range masks {
		s = m.Pattern.ReplaceAllString(s, m.Replace)
	}
	return s
}

// lineDiff renders a unified-style diff of two texts: '-' recorded, '+'
// replayed, with up to two lines of context, computed by longest common
// subsequence (texts longer than maxDiffLines are compared at their first
// differing line only).
func lineDiff(a, b string) string {
	const maxDiffLines = 2000
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	if len(la) > maxDiffLines || len(lb) > maxDiffLines {
		i := 0
		for i < len(la) && i < len(lb) && la[i] == lb[i] {
			i++
		}
		get := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "<end of output>"
		}
		return fmt.Sprintf("first difference at line %d:\n- %s\n+ %s", i+1, get(la), get(lb))
	}
	// LCS table.
	n, m := len(la), len(lb)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if la[i] == lb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var ops []line
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && la[i] == lb[j]:
			ops = append(ops, line{' ', la[i]})
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, line{'-', la[i]})
			i++
		default:
			ops = append(ops, line{'+', lb[j]})
			j++
		}
	}
	keep := make([]bool, len(ops))
	for k, o := range ops {
		if o.op != ' ' {
			for c := max(0, k-2); c <= min(len(ops)-1, k+2); c++ {
				keep[c] = true
			}
		}
	}
	var sb strings.Builder
	gap := false
	for k, o := range ops {
		if !keep[k] {
			gap = true
			continue
		}
		if gap && sb.Len() > 0 {
			sb.WriteString("  ...\n")
		}
		gap = false
		sb.WriteByte(o.op)
		sb.WriteByte(' ')
		sb.WriteString(o.text)
		sb.WriteByte('\n')
	}
	return strings.TrimRight(sb.String(), "\n")
}
