package main

import (
	"context"
	"errors"

	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/ui"
)

type inspectOptions struct {
	in          string
	episodes    []string
	screenshots string
	reward      string
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
writes the episodes' screenshots out as PNG files.`,
		Args: "DIR", ArgsFirst: true, MaxArgs: 1,
		Arguments: []cli.Argument{{Name: "DIR", Usage: "the dataset directory (or -in DIR)"}},
		Examples: []string{
			"forkline inspect runs/demo",
			"forkline inspect runs/demo -episode 7ff7",
			"forkline inspect runs/web -episode b301 -screenshots shots/",
			"forkline inspect runs/demo -json | jq '.reward'",
		},
		Exits: []cli.Exit{
			{Code: cli.ExitOK, Meaning: "printed"},
			{Code: cli.ExitFailed, Meaning: "a damaged dataset (what is wrong is printed, naming the file), or screenshots that could not be written"},
			{Code: cli.ExitBadInput, Meaning: "not a dataset (no manifest.json, or one this build cannot read), or an -episode prefix that matches no episode or several"},
			{Code: cli.ExitInterrupted, Meaning: "interrupted by SIGINT/SIGTERM"},
		},
		Setup: func(f *cli.FlagSet) cli.Runner {
			o := &inspectOptions{reward: inspect.DefaultReward}
			f.Group("input", "")
			f.String(&o.in, "in", "DIR", "the dataset directory (the same as the argument)")
			f.Group("episode", "-episode 7ff7,9713 -screenshots shots/")
			f.List(&o.episodes, "episode", "PREFIX,...", "print these episodes as transcripts; each prefix must match one episode id")
			f.String(&o.screenshots, "screenshots", "DIR", "with -episode: write the episodes' screenshots into DIR as EPISODE-step-NNN.png")
			f.Group("summary", "-reward verify")
			f.String(&o.reward, "reward", "NAME", "the episode-level reward whose distribution is shown")
			return func(ctx context.Context, inv *cli.Invocation) int { return runInspect(ctx, inv, o) }
		},
	}
}

func runInspect(ctx context.Context, inv *cli.Invocation, o *inspectOptions) int {
	dir, ok := datasetArg(inv, o.in)
	if !ok {
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
		ts, err := inspect.Transcripts(ctx, dir, o.episodes, inspect.TranscriptOptions{Screenshots: o.screenshots})
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
