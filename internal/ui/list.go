package ui

import (
	"fmt"
	"io"
	"strconv"

	"github.com/forkline/forkline/inspect"
)

// WriteListHeader is the header line of inspect -list, the columns
// WriteEntry writes under it.
func WriteListHeader(w io.Writer) {
	fmt.Fprintf(w, "%-36s  %-20s  %6s  %-16s  %6s  %5s  %s\n", "EPISODE", "TASK", "REPEAT", "EXIT", "REWARD", "STEPS", "BRANCH OF")
}

// WriteEntry writes one episode of inspect -list as one line.
func WriteEntry(w io.Writer, e inspect.Entry) {
	reward := "-"
	if e.Reward != nil {
		reward = strconv.FormatFloat(*e.Reward, 'g', 4, 64)
	}
	branch := ""
	if e.Parent != "" {
		branch = fmt.Sprintf("%.12s@%d", e.Parent, e.BranchStep)
	}
	exit := e.ExitReason
	if e.TokenDrift {
		exit += " (drift)"
	}
	fmt.Fprintf(w, "%-36s  %-20s  %6d  %-16s  %6s  %5d  %s\n", e.EpisodeID, e.TaskID, e.Repeat, exit, reward, e.Steps, branch)
}

// WriteListFooter says how many episodes the filter selected and how many
// were shown.
func WriteListFooter(w io.Writer, shown int, matched int64, offset int) {
	fmt.Fprintf(w, "%d of %d selected episodes shown", shown, matched)
	if offset > 0 {
		fmt.Fprintf(w, " (from number %d on)", offset+1)
	}
	fmt.Fprintln(w, "; inspect DIR -episode ID shows one")
}
