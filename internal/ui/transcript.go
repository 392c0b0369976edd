package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/runtime"
)

// WriteTranscript writes one episode as forkline inspect -episode prints
// it: what the model was told, each step, the rewards, and the branching
// tree the episode belongs to.
func WriteTranscript(w io.Writer, t *inspect.Transcript) {
	writeEpisodeHeader(w, t)
	writePrompt(w, t)
	for _, s := range t.Steps {
		writeStepHeader(w, s)
		if s.HarnessInput != nil {
			writeHarnessStep(w, s)
		} else {
			writeActionStep(w, s)
		}
	}
	if t.Answer != "" {
		fmt.Fprintf(w, "\n[answer]\n")
		writeBlock(w, "  ", t.Answer)
	}
	writeEpisodeRewards(w, t.Rewards)
	if t.Tree != nil {
		writeTree(w, t.Tree, t.EpisodeID)
	}
}

// writeEpisodeHeader is the episode's identity, how it ended, its reset and
// token record, and the agent harness that ran it.
func writeEpisodeHeader(w io.Writer, t *inspect.Transcript) {
	fmt.Fprintf(w, "episode %s  task %s  repeat %d  (run %s)\n", t.EpisodeID, t.TaskID, t.Repeat, t.RunID)
	fmt.Fprintf(w, "  %s after %d steps in %.0f ms; %s, replica %d, reset %s %.3f ms", t.ExitReason, len(t.Steps), t.DurationMS,
		t.Provider, t.Replica, t.Reset, t.ResetMS)
	if t.TokenRecord {
		fmt.Fprintf(w, "; token record")
		if t.TokenDrift {
			fmt.Fprintf(w, " (cut at a token drift)")
		}
	}
	fmt.Fprintln(w)
	if t.Detail != "" {
		writeBlock(w, "  detail: ", t.Detail)
	}
	if a := t.Agent; a != nil {
		fmt.Fprintf(w, "  agent harness %s", a.Harness)
		if a.Version != "" {
			fmt.Fprintf(w, " %s (%s)", a.Version, a.Package)
		}
		fmt.Fprintf(w, " over %s: exit %d, %d model calls, %d side calls, output %d bytes\n", orNone(a.API, "no API"), a.ExitCode, a.Calls, a.SideCalls, a.LogBytes)
		if len(a.Dropped) > 0 {
			writeWrappedList(w, "  tools not offered to the model: ", a.Dropped)
		}
	}
}

// writePrompt is what the model had before the first step: the system
// prompt, the instruction (an agent harness sends its own), the start page,
// and for a branch the prefix its parent holds.
func writePrompt(w io.Writer, t *inspect.Transcript) {
	if t.System != "" {
		fmt.Fprintf(w, "\n[system]\n")
		writeBlock(w, "  ", t.System)
	}
	if t.Agent == nil {
		fmt.Fprintf(w, "\n[user: the task's instruction]\n")
		writeBlock(w, "  ", orNone(t.Instruction, "(not recorded)"))
	}
	if t.Start != "" {
		fmt.Fprintf(w, "\n[the start page, before any action]\n")
		writeBlock(w, "  ", t.Start)
		if t.StartScreenshot != "" {
			fmt.Fprintf(w, "  screenshot %s\n", t.StartScreenshot)
		}
		if t.StartA11yTree != "" {
			fmt.Fprintf(w, "  accessibility tree:\n")
			writeBlock(w, "    ", t.StartA11yTree)
		}
	}
	if t.Parent != "" {
		fmt.Fprintf(w, "\n[steps 0-%d: the prefix, stored once in its parent %s (inspect DIR -episode %s shows them)]\n",
			t.BranchStep-1, t.Parent, t.Parent[:min(12, len(t.Parent))])
	}
}

// writeStepHeader is a step's number, finish reason, times, token source,
// prompt images and reasoning: what every kind of step has.
func writeStepHeader(w io.Writer, s inspect.Step) {
	fmt.Fprintf(w, "\n[step %d]", s.Index)
	if s.FinishReason != "" {
		fmt.Fprintf(w, " finish_reason %s", s.FinishReason)
	}
	fmt.Fprintf(w, "  (policy %.1f ms, environment %.1f ms)\n", s.PolicyMS, s.EnvMS)
	if s.TokenPath != "" {
		fmt.Fprintf(w, "  tokens: %s via %s (%s)\n", s.TokenPath, orNone(s.TokenEndpoints, "?"), orNone(s.Model, "model not reported"))
	}
	if len(s.PromptImages) > 0 {
		fmt.Fprintf(w, "  images in the prompt: %d\n", len(s.PromptImages))
	}
	if s.Reasoning != "" {
		fmt.Fprintf(w, "  reasoning:\n")
		writeBlock(w, "    ", s.Reasoning)
	}
}

// writeHarnessStep is a model call of an agent harness: what the harness
// sent, the model's text, its tool calls and the step's rewards.
func writeHarnessStep(w io.Writer, s inspect.Step) {
	if s.Index == 0 || s.HistoryCut != "" {
		if s.HistoryCut != "" {
			fmt.Fprintf(w, "  the harness started over (%s): its whole conversation now\n", s.HistoryCut)
		}
		writeHarnessMessages(w, s.HarnessInput, false)
	} else {
		writeHarnessMessages(w, s.HarnessInput, true)
	}
	if s.ModelText != "" {
		fmt.Fprintf(w, "  model:\n")
		writeBlock(w, "    ", s.ModelText)
	}
	var calls []runtime.ToolCall
	_ = json.Unmarshal(s.ToolCalls, &calls)
	for _, c := range calls {
		fmt.Fprintf(w, "  tool call: %s %s\n", c.Name, c.Arguments)
	}
	if len(calls) == 0 {
		fmt.Fprintf(w, "  no tool call: the harness's last model call\n")
	}
	writeStepRewards(w, s.Rewards)
}

// writeActionStep is a step of forkline's own loop: the model's text, the
// action, its observation as the model saw it, the screenshot and the
// step's rewards.
func writeActionStep(w io.Writer, s inspect.Step) {
	if s.ModelText != "" {
		fmt.Fprintf(w, "  model:\n")
		writeBlock(w, "    ", s.ModelText)
	}
	switch {
	case s.ActionKind == "":
		fmt.Fprintf(w, "  action: none\n")
	case string(s.Arguments) == "{}" || len(s.Arguments) == 0:
		fmt.Fprintf(w, "  action: %s\n", s.ActionKind)
	default:
		fmt.Fprintf(w, "  action: %s %s\n", s.ActionKind, s.Arguments)
	}
	if runtime.ActionKind(s.ActionKind) != runtime.ActDone && s.ActionKind != "" {
		fmt.Fprintf(w, "  observation, as the model saw it:\n")
		writeBlock(w, "    ", s.Observation)
	}
	if s.Screenshot != nil {
		where := s.Screenshot.Stored
		switch {
		case s.Screenshot.File != "":
			where = "written to " + s.Screenshot.File
		case where == "none":
			where = "pixels not kept (capture pixels=none)"
		default:
			where = "stored in the " + where
		}
		fmt.Fprintf(w, "  screenshot: %dx%d sha256 %.16s…, %s\n", s.Screenshot.Width, s.Screenshot.Height, s.Screenshot.SHA256, where)
	}
	if s.A11yTree != "" {
		fmt.Fprintf(w, "  accessibility tree (%d bytes stored):\n", s.A11yBytes)
		writeBlock(w, "    ", s.A11yTree)
	} else if s.A11yBytes > 0 {
		fmt.Fprintf(w, "  accessibility tree: %d bytes (-a11y %d shows it)\n", s.A11yBytes, s.Index)
	}
	writeStepRewards(w, s.Rewards)
}

func writeStepRewards(w io.Writer, rewards []inspect.Reward) {
	for _, r := range rewards {
		fmt.Fprintf(w, "  reward %s = %s\n", r.Name, fmtMean(r.Value))
	}
}

// writeEpisodeRewards is every reward of the episode, where it was given,
// its verifier's exit code and source, and its detail.
func writeEpisodeRewards(w io.Writer, rewards []inspect.Reward) {
	fmt.Fprintf(w, "\n[rewards]\n")
	if len(rewards) == 0 {
		fmt.Fprintf(w, "  none\n")
	}
	for _, r := range rewards {
		at := "episode"
		if r.Step != nil {
			at = "step " + strconv.Itoa(int(*r.Step))
		}
		fmt.Fprintf(w, "  %s = %s  (%s; exit code %d", r.Name, fmtMean(r.Value), at, r.ExitCode)
		if r.Source != "" {
			fmt.Fprintf(w, "; from %s", r.Source)
		}
		fmt.Fprintln(w, ")")
		if r.Detail != "" {
			writeBlock(w, "    ", r.Detail)
		}
	}
}

// writeHarnessMessages writes what a harness sent with a call: its
// messages, or (results) the tool results and what followed them, which
// the step before's calls got back.
func writeHarnessMessages(w io.Writer, raw json.RawMessage, results bool) {
	var msgs []struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCallID string `json:"tool_call_id"`
	}
	_ = json.Unmarshal(raw, &msgs)
	for _, m := range msgs {
		switch {
		case m.Role == "tool":
			fmt.Fprintf(w, "  [result of %s, as the harness sent it back]\n", m.ToolCallID)
		case results:
			fmt.Fprintf(w, "  [%s, added by the harness]\n", m.Role)
		default:
			fmt.Fprintf(w, "  [%s]\n", m.Role)
		}
		writeBlock(w, "    ", m.Content)
	}
}

// writeTree writes the branching tree from its root, each node with its
// steps and rewards, the episode marked pointed out.
func writeTree(w io.Writer, root *inspect.TreeNode, marked string) {
	fmt.Fprintf(w, "\n[branching tree of root %s]\n", root.EpisodeID)
	var walk func(n *inspect.TreeNode, indent string)
	walk = func(n *inspect.TreeNode, indent string) {
		label := "root"
		if n.Parent != "" {
			label = fmt.Sprintf("branch %d at step %d", n.BranchIndex, n.BranchStep)
		}
		var rw []string
		for _, k := range sortedKeys(n.Rewards) {
			rw = append(rw, k+"="+num(n.Rewards[k]))
		}
		if len(rw) > 0 {
			rw[0] = "  reward " + rw[0]
		}
		here := ""
		if n.EpisodeID == marked {
			here = "   <- this episode"
		}
		fmt.Fprintf(w, "  %s%-22s %s  %-9s %s%s%s\n", indent, label, n.EpisodeID[:min(12, len(n.EpisodeID))], n.ExitReason,
			plural(n.Steps, "step"), strings.Join(rw, " "), here)
		for _, b := range n.Branches {
			walk(b, indent+"  ")
		}
	}
	walk(root, "")
}
