// Package datagen writes synthetic forkline datasets of any size for the
// benchmarks (export, view): episodes of a few shell tasks, three steps
// each (a command, a file written, done), with outputs of the sizes a
// scripted collection of such tasks records, and — when asked — a model
// turn per step with token ids, so that the token targets have records.
//
// It writes through the code collect uses: task specs parsed and hashed by
// package task, episode ids and group ids as collect and episode derive
// them, each step made a row by capture's sink (the token record assembled
// there), committed by record (formats/shard's episode-atomic writer) and
// closed with a manifest holding the provider, policy, capture policy,
// tasks, plan and a collect summary. The result is a genuine, complete
// dataset that inspect, verify, view and export read as any other.
//
// It builds one episode at a time: memory does not grow with the episodes
// but for the writer's set of committed ids (about 100 bytes an episode).
// It does not run sandboxes or policies, and is no part of forkline's
// commands: only benchmarks and their tests import it.
package datagen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/record"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// Config says what to generate.
type Config struct {
	// Dir is the dataset's directory; it must not hold a dataset.
	Dir string
	// Episodes is how many episodes to write (spread over the tasks in
	// turn: episode i is task i mod 4, repeat i / 4).
	Episodes int
	// Tokens gives every step a model turn (model text, a tool call, token
	// ids with logprobs, provenance "tito"), so each episode has a token
	// record; without it the episodes are a scripted policy's, with none.
	Tokens bool
	// Shards is the writer's configuration (zero: collect's default).
	Shards shard.Config
}

// OneTask is the first of Tasks alone: a short shell episode (a command,
// a file written and read, done), which the benchmarks' -collect paths
// collect for real.
const OneTask = `id: export-bench
instruction: Write the number of lines in notes.txt into count.txt.
files:
  notes.txt: "buy milk\ncall Ada\nfix the bike\n"
solution:
  - {kind: exec, cmd: wc -l < notes.txt}
  - {kind: write_file, path: count.txt, content: "3\n"}
  - {kind: done, answer: "3"}
verify:
  cmd: test "$(cat count.txt)" = 3
  reward: exit
`

// Tasks are the generator's task specs (YAML), in the order episodes use
// them.
const Tasks = OneTask + `---
id: grep-errors
instruction: List the ERROR lines of app.log, with their line numbers, in errors.txt, and say how many there are.
files:
  app.log: "INFO start\nERROR disk full\nINFO retry\nERROR timeout\n"
solution:
  - {kind: exec, cmd: "grep -n ERROR app.log"}
  - {kind: write_file, path: errors.txt, content: "2:ERROR disk full\n4:ERROR timeout\n"}
  - {kind: done, answer: "2 errors: disk full (line 2) and timeout (line 4)"}
verify:
  cmd: grep -q timeout errors.txt
  reward: exit
---
id: list-sources
instruction: Write the names of the Go files under src, one a line and sorted, into files.txt.
files:
  src/main.go: "package main\n"
  src/util.go: "package main\n"
solution:
  - {kind: exec, cmd: "ls -la src && find src -name '*.go' | sort"}
  - {kind: write_file, path: files.txt, content: "src/main.go\nsrc/util.go\n"}
  - {kind: done, answer: "2 files"}
verify:
  cmd: test -s files.txt
  reward: exit
---
id: fix-config
instruction: The service reads config.ini; set its port to 8080 and its log level to debug, keeping every other setting.
files:
  config.ini: "[server]\nport = 80\nhost = 0.0.0.0\n[log]\nlevel = info\n"
solution:
  - {kind: exec, cmd: cat config.ini}
  - {kind: write_file, path: config.ini, content: "[server]\nport = 8080\nhost = 0.0.0.0\nworkers = 4\ntimeout = 30s\n\n[log]\nlevel = debug\nfile = /var/log/service.log\nrotate = daily\n\n[db]\nurl = postgres://localhost/app\npool = 10\n"}
  - {kind: done, answer: "port 8080, log level debug"}
verify:
  cmd: grep -q 8080 config.ini
  reward: exit
`

// Result is what Generate wrote.
type Result struct {
	RunID    string
	Episodes int
	Steps    int64
}

// Generate writes cfg.Episodes episodes into a new dataset in cfg.Dir and
// closes it complete.
func Generate(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Episodes <= 0 {
		return Result{}, fmt.Errorf("datagen: %d episodes", cfg.Episodes)
	}
	specs, err := task.Parse("datagen-tasks.yaml", []byte(Tasks))
	if err != nil {
		return Result{}, err
	}
	if cfg.Shards == (shard.Config{}) {
		cfg.Shards = shard.DefaultConfig()
	}
	tasksRec, err := task.EncodeRecords(specs)
	if err != nil {
		return Result{}, err
	}
	var rb [6]byte
	rand.Read(rb[:])
	runID := time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(rb[:])
	repeats := (cfg.Episodes + len(specs) - 1) / len(specs)
	capPol := capture.DefaultPolicy()
	polName, polOpts := "script", map[string]string{}
	if cfg.Tokens {
		polName, polOpts = "openai", map[string]string{"model": "datagen-model"}
	}
	empty := ""
	prov := manifest.Provider{Name: "local", Params: map[string]string{}, Reset: "fork",
		Capabilities: &providers.Capabilities{Checkpoint: true, Fork: true, Isolation: "none", ForkMethod: "overlay"}}
	pol := manifest.Policy{Name: polName, ScriptSHA256: &empty, Options: polOpts}
	plan := manifest.Plan{Repeats: repeats, Replicas: 8, Reset: "auto", Episodes: cfg.Episodes, Part: manifest.Part{Index: 0, Count: 1},
		Total: cfg.Episodes, Config: map[string][]string{"repeats": {fmt.Sprint(repeats)}, "replicas": {"8"}}}
	rec, err := record.Open(record.Config{Dir: cfg.Dir, Shards: cfg.Shards, Manifest: shard.Manifest{
		SchemaVersion: schemas.Version, Tool: "forkline", ToolVersion: collect.Version, RunID: runID,
		Tasks: tasksRec, Plan: plan.Encode(), Capture: capPol.MarshalManifest(), Provider: prov.Encode(), Policy: pol.Encode(),
	}})
	if err != nil {
		return Result{}, err
	}
	began := time.Now()
	hashes := make([]string, len(specs))
	groups := make([]string, len(specs))
	for i, s := range specs {
		hashes[i] = s.Hash()
		groups[i] = episode.RootGroupID(s.ID, hashes[i])
	}
	g := gen{tokens: cfg.Tokens}
	res := Result{RunID: runID}
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < cfg.Episodes; i++ {
		if err := ctx.Err(); err != nil {
			rec.Close(shard.StatusPartial, manifest.Summary{})
			return res, err
		}
		t := i % len(specs)
		spec := &specs[t]
		b, err := g.episode(i, i/len(specs), spec, hashes[t], groups[t], runID, capPol, start.Add(time.Duration(i)*40*time.Millisecond))
		if err != nil {
			rec.Close(shard.StatusPartial, manifest.Summary{})
			return res, err
		}
		if err := rec.Commit(ctx, &b); err != nil {
			rec.Close(shard.StatusPartial, manifest.Summary{})
			return res, err
		}
		res.Episodes++
		res.Steps += int64(len(b.Steps))
	}
	one := 1.0
	wall := time.Since(began).Seconds()
	sum := manifest.Collect{RunID: runID, Status: string(shard.StatusComplete), Planned: cfg.Episodes, Episodes: cfg.Episodes,
		Ran: cfg.Episodes, Steps: res.Steps, RanSteps: res.Steps, ByExit: map[string]int{string(runtime.ExitDone): cfg.Episodes},
		Errors: []manifest.ErrorCount{}, RewardMean: &one, Rewarded: cfg.Episodes, WallSec: wall,
		EpisodesPerSec: float64(cfg.Episodes) / wall, StepsPerSec: float64(res.Steps) / wall}
	if err := rec.Close(shard.StatusComplete, manifest.Summary{Collect: &sum}); err != nil {
		return res, err
	}
	return res, nil
}

// gen makes episodes; its buffers are reused from one to the next.
type gen struct {
	tokens bool
	out    strings.Builder
}

// episode is episode i (repeat of spec) as collect would commit it.
func (g *gen) episode(i, repeat int, spec *task.Spec, hash, group, runID string, p capture.Policy, at time.Time) (shard.EpisodeBatch, error) {
	id := collect.EpisodeID(spec.ID, hash, repeat, 0)
	ep := schemas.EpisodeRow{EpisodeID: id, RunID: runID, TaskID: spec.ID, TaskHash: hash, Repeat: int32(repeat),
		Replica: int32(i % 8), Attempt: 1, Provider: "local", GoldenID: "cp-" + hash[:12], ResetStrategy: "fork+standby",
		ResetOrigin: "overlay", ResetMS: 0.001 + float64(i%97)/1000, GoldenBuildMS: 159.7, GoldenBytes: 31,
		ExitReason: string(runtime.ExitDone), StartedAt: at.UnixMilli(), GroupID: &group}
	sink := capture.NewSink(p, id, spec.ID)
	var prompt []int32
	var envMS float64
	for k, a := range spec.Solution {
		s := runtime.Step{Index: k, Action: a, Started: at.Add(time.Duration(k) * 7 * time.Millisecond),
			PolicyTime: time.Duration(300+i%500) * time.Nanosecond, EnvTime: time.Duration(k+1) * time.Duration(2000000+i%3000000)}
		s.Observation = g.observation(i, spec.ID, a)
		if g.tokens {
			s.Model, prompt = modelTurn(i, k, a, prompt)
			s.PolicyTime += 800 * time.Millisecond
		}
		envMS += schemas.Millis(s.EnvTime)
		if err := sink.WriteStep(context.Background(), s); err != nil {
			return shard.EpisodeBatch{}, err
		}
		if a.Kind == runtime.ActDone {
			ep.Answer = a.Answer
		}
	}
	steps := sink.Steps()
	ep.Steps = int32(len(steps))
	ep.EnvMS, ep.PolicyMS = envMS, 0.002
	ep.DurationMS, ep.VerifyMS = envMS+0.1, 3.8
	sink.StartRow(&ep)
	if err := sink.TokenRecord(&ep); err != nil {
		return shard.EpisodeBatch{}, err
	}
	one := 1.0
	return shard.EpisodeBatch{Episode: ep, Steps: steps, Blobs: sink.Blobs(),
		Rewards: []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: &one, Source: spec.Verify.Cmd}}}, nil
}

// observation is what action a of episode i produced: a command's output
// of a few lines to a few kilobytes (varying with i), a write's
// confirmation, nothing for done.
func (g *gen) observation(i int, taskID string, a runtime.Action) runtime.Observation {
	switch a.Kind {
	case runtime.ActExec:
		g.out.Reset()
		switch taskID {
		case "export-bench":
			g.out.WriteString("3\n")
		case "grep-errors":
			for l := 0; l < 2+i%13; l++ {
				fmt.Fprintf(&g.out, "%d:2026-12-01T10:%02d:%02d ERROR worker %d: request %d failed: upstream timeout after 30s\n", 2+l*3, l%60, (i+l)%60, l%8, i*31+l)
			}
		case "list-sources":
			g.out.WriteString("total 16\ndrwxr-xr-x 2 agent agent 4096 Dec  1 10:00 .\ndrwxr-xr-x 3 agent agent 4096 Dec  1 10:00 ..\n")
			for l := 0; l < 2+i%17; l++ {
				fmt.Fprintf(&g.out, "-rw-r--r-- 1 agent agent %5d Dec  1 10:00 file%03d.go\n", 100+(i*7+l)%9000, l)
			}
			for l := 0; l < 2+i%17; l++ {
				fmt.Fprintf(&g.out, "src/file%03d.go\n", l)
			}
		default:
			g.out.WriteString("[server]\nport = 80\nhost = 0.0.0.0\n[log]\nlevel = info\n")
			for l := 0; l < i%9; l++ {
				fmt.Fprintf(&g.out, "# setting %d kept from the previous release\nopt%d = %d\n", l, l, i+l)
			}
		}
		out := []byte(g.out.String())
		return runtime.Observation{Output: out, OutputBytes: int64(len(out)), ExitCode: 0}
	case runtime.ActWriteFile:
		out := []byte(fmt.Sprintf("wrote %d bytes to %s", len(a.Content), a.Path))
		return runtime.Observation{Output: out, OutputBytes: int64(len(out)), ExitCode: -1}
	}
	return runtime.Observation{ExitCode: -1}
}

// modelTurn is step k's model turn: the prompt continues the previous
// turn's prompt and response with the observation's tokens (token in,
// token out), so the episode's record is whole.
func modelTurn(i, k int, a runtime.Action, prev []int32) (*runtime.ModelEvent, []int32) {
	var prompt []int32
	if k == 0 {
		n := 240 + i%60
		prompt = make([]int32, n)
		for j := range prompt {
			prompt[j] = int32(100 + (j*7919+i)%150000)
		}
	} else {
		prompt = append([]int32(nil), prev...)
		for j := 0; j < 12+(i+k)%40; j++ {
			prompt = append(prompt, int32(100+(j*104729+i+k)%150000))
		}
	}
	args, _ := a.MarshalJSON()
	resp := make([]int32, 20+(i+k)%30)
	lp := make([]float32, len(resp))
	mask := make([]int8, len(resp))
	for j := range resp {
		mask[j] = 1
		resp[j] = int32(100 + (j*15485863+i*3+k)%150000)
		lp[j] = -float32((j+i)%50) / 100
	}
	m := &runtime.ModelEvent{Model: "datagen-model", Actions: []runtime.Action{a},
		ToolCalls: []runtime.ToolCall{{ID: fmt.Sprintf("call_%d_%d", i, k), Name: string(a.Kind), Arguments: string(args)}},
		PromptIDs: prompt, ResponseIDs: resp, ResponseMask: mask, Logprobs: lp, FinishReason: "tool_calls",
		Usage:      runtime.Usage{PromptTokens: len(prompt), CompletionTokens: len(resp)},
		Latency:    800 * time.Millisecond,
		Provenance: runtime.Provenance{Path: runtime.TokenPathTITO, Endpoints: []string{"/v1/completions"}}}
	next := append(append([]int32(nil), prompt...), resp...)
	return m, next
}
