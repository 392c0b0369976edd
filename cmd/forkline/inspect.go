package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/forkline/forkline/export"

	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/ui"
)

type inspectOptions struct {
	in          string
	episodes    []string
	screenshots string
	a11y        string
	reward      string

	list      bool
	tasks     []string
	wheres    []string
	minReward string
	maxReward string
	offset    int
	limit     int
}

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:    "inspect",
		Summary: "what a dataset holds (episodes, rewards, reset latency, tokens, bytes); an episode as a transcript",
		About: `Without -episode: the run's status, plan, provider, policy and capture policy; episodes by task and
exit reason; the distribution of the -reward reward; reset latency p50/p95 by strategy and fork
method; how many episodes have a token record and how many were flagged with token drift; bytes on
disk per table and per step; and every problem formats/shard's Verify finds. The dataset is read as
a stream: memory does not grow with its episodes.

With -episode: each named episode as a transcript, the system prompt and the task's instruction,
then every step's model text and reasoning, its action and its observation as the model saw it (the
same rendering the policy and the exports use), its screenshot, and the rewards. -screenshots
writes the episodes' screenshots out as PNG files; -a11y prints the stored accessibility trees of a web
task's steps (captured with a11y=full) as text, one node a line with its box in the screenshot.

With -list: the episodes -task, -where, -min-reward and -max-reward select (the selection export applies, so the
list is what an export with the same filters reads), one a line, -limit of them from -offset on, and
how many were selected in all; -json prints them as {"matched", "offset", "limit", "episodes"}. The
list is read from the episodes and rewards tables only, as a stream.`,
		Args: "DIR", ArgsFirst: true, MaxArgs: 1,
		Arguments: []cli.Argument{{Name: "DIR", Usage: "the dataset directory (or -in DIR)"}},
		Examples: []string{
			"forkline inspect runs/demo",
			"forkline inspect runs/demo -episode 7ff7",
			"forkline inspect runs/web -episode b301 -screenshots shots/",
			"forkline inspect runs/demo -json | jq '.reward'",
			"forkline inspect runs/demo -list -where exit_reason!=done",
			"forkline inspect runs/demo -list -task fix-sum -min-reward 1 -limit 0 -json | jq -r '.episodes[].episode_id'",
			"forkline inspect runs/web -episode b301 -a11y start,2",
		},
		Exits: []cli.Exit{
			{Code: cli.ExitOK, Meaning: "printed"},
			{Code: cli.ExitFailed, Meaning: "a damaged dataset (what is wrong is printed, naming the file), or screenshots that could not be written"},
			{Code: cli.ExitBadInput, Meaning: "not a dataset (no manifest.json, or one this build cannot read), an -episode prefix that matches no episode or several, or a filter that cannot be read"},
			{Code: cli.ExitInterrupted, Meaning: "interrupted by SIGINT/SIGTERM"},
		},
		Setup: func(f *cli.FlagSet) cli.Runner {
			o := &inspectOptions{reward: inspect.DefaultReward, limit: inspect.DefaultListLimit}
			f.Group("input", "")
			f.String(&o.in, "in", "DIR", "the dataset directory (the same as the argument)")
			f.Group("episode", "-episode 7ff7,9713 -screenshots shots/")
			f.List(&o.episodes, "episode", "PREFIX,...", "print these episodes as transcripts; each prefix must match one episode id")
			f.String(&o.screenshots, "screenshots", "DIR", "with -episode: write the episodes' screenshots into DIR as EPISODE-step-NNN.png")
			f.String(&o.a11y, "a11y", "all|start|STEP,...", "with -episode: print these accessibility trees (the start page's, a step's by its index, or all)")
			f.Group("list", "-list -where exit_reason!=done -min-reward 0.5 -limit 20")
			f.Bool(&o.list, "list", "list the episodes the filters select, one a line")
			f.List(&o.tasks, "task", "ID,...", "with -list: only episodes of these tasks")
			f.Strings(&o.wheres, "where", "COL=V1[,V2]", "with -list: only episodes whose column has one of the values (COL!=... for none of them); columns: "+strings.Join(export.WhereColumns(), ", "))
			f.String(&o.minReward, "min-reward", "X", "with -list: only episodes whose -reward reward is at least X (a null reward never is)")
			f.String(&o.maxReward, "max-reward", "X", "with -list: only episodes whose -reward reward is at most X (a null reward never is)")
			f.Int(&o.offset, "offset", "N", "with -list: skip the first N selected episodes")
			f.Int(&o.limit, "limit", "N", "with -list: show at most N episodes (0: all of them)")
			f.Group("summary", "-reward verify")
			f.String(&o.reward, "reward", "NAME", "the episode-level reward whose distribution is shown (with -list: the one listed and -min-reward tests)")
			return func(ctx context.Context, inv *cli.Invocation) int { return runInspect(ctx, inv, o) }
		},
	}
}

func runInspect(ctx context.Context, inv *cli.Invocation, o *inspectOptions) int {
	dir, ok := datasetArg(inv, o.in)
	if !ok {
		return cli.ExitBadInput
	}
	if o.list {
		return runInspectList(ctx, inv, dir, o)
	}
	for _, name := range []string{"task", "where", "min-reward", "max-reward", "offset", "limit"} {
		if inv.Given(name) {
			inv.Errorf("-%s selects the episodes of -list; give -list too", name)
			return cli.ExitBadInput
		}
	}
	if o.a11y != "" && len(o.episodes) == 0 {
		inv.Errorf("-a11y prints the accessibility trees of the episodes -episode names; give -episode PREFIX")
		return cli.ExitBadInput
	}
	if o.screenshots != "" && len(o.episodes) == 0 {
		inv.Errorf("-screenshots writes the screenshots of the episodes -episode names; give -episode PREFIX")
		return cli.ExitBadInput
	}
	if len(o.episodes) > 0 && inv.Given("reward") {
		inv.Errorf("-reward chooses the summary's reward; a transcript shows every reward (leave out -reward or -episode)")
		return cli.ExitBadInput
	}
	if len(o.episodes) > 0 {
		to := inspect.TranscriptOptions{Screenshots: o.screenshots}
		if o.a11y != "" {
			a, err := inspect.ParseA11ySteps(o.a11y)
			if err != nil {
				inv.Errorf("-a11y: %v", err)
				return cli.ExitBadInput
			}
			to.A11y = a
		}
		ts, err := inspect.Transcripts(ctx, dir, o.episodes, to)
		if err != nil {
			return inspectFailure(inv, err)
		}
		if inv.JSON {
			inv.PrintJSON(ts)
			return cli.ExitOK
		}
		for i, t := range ts {
			if i > 0 {
				inv.Stdout.Write([]byte("\n"))
			}
			ui.WriteTranscript(inv.Stdout, t)
		}
		return cli.ExitOK
	}
	s, err := inspect.Summarize(ctx, dir, inspect.Options{Reward: o.reward})
	if s != nil {
		if inv.JSON {
			inv.PrintJSON(s)
		} else {
			ui.WriteSummary(inv.Stdout, s)
		}
	}
	if err != nil {
		return inspectFailure(inv, err)
	}
	return cli.ExitOK
}

// runInspectList prints the episodes the filters select, as a stream: the
// page is written as it is read, and memory does not grow with the run.
func runInspectList(ctx context.Context, inv *cli.Invocation, dir string, o *inspectOptions) int {
	for _, name := range []string{"episode", "screenshots", "a11y"} {
		if inv.Given(name) {
			inv.Errorf("-%s shows episodes as transcripts; -list lists them (leave out one of the two)", name)
			return cli.ExitBadInput
		}
	}
	if o.offset < 0 || o.limit < 0 {
		inv.Errorf("-offset and -limit are counts of episodes: want 0 or more")
		return cli.ExitBadInput
	}
	f := export.Filter{Tasks: o.tasks, Reward: o.reward}
	for _, w := range o.wheres {
		wh, err := export.ParseWhere(w)
		if err != nil {
			return inv.Fail(cli.ExitBadInput, fmt.Errorf("inspect: -where: %w", err))
		}
		f.Where = append(f.Where, wh)
	}
	if o.minReward != "" {
		v, err := parseReward("inspect", "min-reward", o.minReward)
		if err != nil {
			return inv.Fail(cli.ExitBadInput, err)
		}
		f.MinReward = v
	}
	if o.maxReward != "" {
		v, err := parseReward("inspect", "max-reward", o.maxReward)
		if err != nil {
			return inv.Fail(cli.ExitBadInput, err)
		}
		f.MaxReward = v
	}
	// Buffered: a list of 100,000 lines is written in large writes. The
	// JSON object is written as it goes, its count last.
	out := bufio.NewWriter(inv.Stdout)
	defer out.Flush()
	var matched int64
	shown := 0
	if inv.JSON {
		fmt.Fprintf(out, "{\n  \"dir\": %s,\n  \"offset\": %d,\n  \"limit\": %d,\n  \"episodes\": [", jsonText(dir), o.offset, o.limit)
	} else {
		ui.WriteListHeader(out)
	}
	err := inspect.EachEpisode(ctx, dir, f, func(e inspect.Entry) error {
		matched++
		if matched <= int64(o.offset) || (o.limit > 0 && shown >= o.limit) {
			return nil
		}
		if inv.JSON {
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			if shown > 0 {
				out.WriteString(",")
			}
			out.WriteString("\n    ")
			out.Write(b)
		} else {
			ui.WriteEntry(out, e)
		}
		shown++
		return nil
	})
	if err != nil {
		out.Flush()
		return inspectFailure(inv, err)
	}
	if inv.JSON {
		if shown > 0 {
			out.WriteString("\n  ")
		}
		fmt.Fprintf(out, "],\n  \"matched\": %d\n}\n", matched)
	} else {
		ui.WriteListFooter(out, shown, matched, o.offset)
	}
	return cli.ExitOK
}

func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func inspectFailure(inv *cli.Invocation, err error) int {
	switch {
	case errors.Is(err, context.Canceled):
		return inv.Fail(cli.ExitInterrupted, err)
	case errors.Is(err, inspect.ErrNotDataset), errors.Is(err, inspect.ErrNoMatch):
		return inv.Fail(cli.ExitBadInput, err)
	default:
		return inv.Fail(cli.ExitFailed, err)
	}
}
