package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/forkline/forkline/gateway"
	"github.com/forkline/forkline/harness"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// episodePolicy is one episode's agent: it runs the harness in the
// episode's session and makes a step of every call of its trajectory
// (runtime.SelfDriving).
type episodePolicy struct {
	src *source
	ep  policy.Episode
	// replay, when set, answers the harness from a recorded episode.
	replay *recorded

	record schemas.AgentRecord
	blobs  []schemas.BlobRow
}

// Decide is never called: the harness decides (RunEpisode).
func (p *episodePolicy) Decide(context.Context, runtime.History) (runtime.Decision, error) {
	return runtime.Decision{}, errors.New("agent: an agent harness runs its episode itself (runtime.Rollout calls RunEpisode)")
}

// Continue refuses to take up a history: a harness's process and memory
// are not forked, only files, so an agent episode cannot branch.
func (p *episodePolicy) Continue(context.Context, runtime.History, runtime.Policy) error {
	return errors.New("agent: an agent harness's episode cannot continue another's history: its process and memory are not forked")
}

// EpisodeRecord implements episode.Recorded.
func (p *episodePolicy) EpisodeRecord() (string, []schemas.BlobRow) {
	if p.record.Harness == "" {
		return "", nil
	}
	b, _ := json.Marshal(p.record)
	return string(b), p.blobs
}

// exited is what the harness's command came to.
type exited struct {
	obs runtime.Observation
	err error
}

// RunEpisode runs the harness in s with the episode's instruction and
// records its trajectory (see the package documentation).
func (p *episodePolicy) RunEpisode(ctx context.Context, s runtime.Session, start runtime.History, lim runtime.Limits, sink runtime.StepSink) (runtime.Result, error) {
	began := time.Now()
	res := runtime.Result{}
	finish := func(exit runtime.ExitReason, detail string, err error) (runtime.Result, error) {
		res.Exit, res.Detail, res.Err = exit, detail, err
		res.Duration = time.Since(began)
		res.EnvTime = max(res.Duration-res.PolicyTime, 0)
		return res, nil
	}
	if len(start.Steps) > 0 {
		return finish(runtime.ExitPolicyError, "agent: an agent harness's episode cannot continue a history", nil)
	}
	p.record = schemas.AgentRecord{Harness: p.src.cfg.harness, ExitCode: -1}
	if p.src.install.Dir != "" {
		p.record.Package, p.record.Version = p.src.install.Package, p.src.install.Version
	}
	gw, base, binary, relay, err := p.src.launch()
	if err != nil {
		return finish(runtime.ExitPolicyError, err.Error(), err)
	}
	timeout := lim.EpisodeTimeout
	if timeout <= 0 {
		timeout = p.src.cfg.episodeTimeout
	}
	main, side, err := p.models()
	if err != nil {
		return finish(runtime.ExitPolicyError, err.Error(), err)
	}
	rec := newRecorder(p.src, p.ep.ID, lim.MaxSteps, main)
	rec.sideModel = side
	cred, unregister := gw.Register(rec)
	defer unregister()
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	home := "/tmp/forkline-agent-" + hex.EncodeToString(nonce[:])
	script, err := harness.Script(harness.Launch{Harness: p.src.cfg.harness, Binary: binary, Cmd: p.src.cfg.cmd,
		Instruction: start.Instruction, BaseURL: base, Credential: cred, Model: p.src.cfg.model, Home: home, Relay: relay})
	if err != nil {
		return finish(runtime.ExitPolicyError, err.Error(), err)
	}

	runCtx, kill := context.WithCancel(ctx)
	defer kill()
	done := make(chan exited, 1)
	go func() {
		obs, err := s.Act(runCtx, runtime.Action{Kind: runtime.ActExec, Cmd: script, TimeoutMS: timeout.Milliseconds()})
		done <- exited{obs, err}
	}()

	var pending *runtime.Step
	var sinkErr error
	steps := 0
	deliver := func(st runtime.Step) {
		if sinkErr != nil {
			return
		}
		steps++
		if err := sink.WriteStep(context.WithoutCancel(ctx), st); err != nil {
			sinkErr = fmt.Errorf("runtime: recording step %d: %w", st.Index, err)
			kill()
		}
	}
	process := func() {
		for _, ev := range rec.take() {
			if pending != nil {
				pending.Observation = observationOf(ev.fresh)
				pending.EnvTime = ev.idle
				pending.Observation.Duration = ev.idle
				deliver(*pending)
				pending = nil
			}
			if ev.reply == nil {
				continue
			}
			m := ev.reply.Event
			m.Harness = &runtime.HarnessCall{Input: messagesJSON(ev.fresh), Cut: ev.cut, Tools: ev.tools}
			res.PolicyTime += ev.took
			pending = &runtime.Step{Index: ev.index, Model: m, Started: ev.arrived, PolicyTime: ev.took}
		}
	}

	// The backstop past the provider's own kill at the time limit.
	backstop := time.NewTimer(timeout + 30*time.Second)
	defer backstop.Stop()
	var stopTimer <-chan time.Time
	var ex exited
	killedFor := ""
wait:
	for {
		select {
		case <-rec.notify:
			process()
			if rec.stopped() != nil && stopTimer == nil {
				stopTimer = time.After(stopGrace)
			}
		case ex = <-done:
			break wait
		case <-stopTimer:
			killedFor = "stopped"
			kill()
		case <-backstop.C:
			killedFor = "timeout"
			kill()
		case <-ctx.Done():
			kill()
			ex = <-done
			break wait
		}
	}
	unregister()
	process()
	if pending != nil {
		// The harness ended after this reply: nothing came back.
		pending.Observation = runtime.Observation{ExitCode: -1}
		deliver(*pending)
	}
	res.Steps = steps

	p.keepLog(ex)
	rec.mu.Lock()
	p.record.API, p.record.Calls = rec.api, rec.calls
	p.record.Dropped, p.record.Refused = rec.dropped, rec.refused
	p.keepSideCalls(rec.side)
	answer, cause := rec.lastAnswer, rec.stop
	rec.mu.Unlock()
	if ex.err == nil && ex.obs.ExitCode >= 0 && !ex.obs.TimedOut {
		p.record.ExitCode = ex.obs.ExitCode
	}
	if ex.err == nil || errors.Is(ex.err, context.Canceled) {
		p.cleanup(ctx, s, home)
	}
	if sinkErr != nil {
		return res, sinkErr
	}

	switch {
	case ctx.Err() != nil:
		return finish(runtime.ExitCancelled, "", nil)
	case cause != nil:
		return finish(cause.exit, "agent: "+cause.detail, cause.err)
	case ex.err != nil && killedFor == "timeout", ex.err == nil && ex.obs.TimedOut:
		return finish(runtime.ExitTimeout, fmt.Sprintf("agent: %s was killed at the episode's time limit (%s)", p.src.cfg.harness, timeout), nil)
	case ex.err != nil:
		return finish(runtime.ExitEnvError, "agent: running the harness: "+ex.err.Error(), ex.err)
	case ex.obs.ExitCode == harness.ScriptExitSetup:
		return finish(runtime.ExitEnvError, "agent: the harness's scratch directory could not be made: "+logTail(ex.obs.Output, 400), nil)
	case ex.obs.ExitCode != 0:
		detail := fmt.Sprintf("agent: %s exited with status %d", p.src.cfg.harness, ex.obs.ExitCode)
		if ex.obs.ExitCode == 126 || ex.obs.ExitCode == 127 {
			detail += fmt.Sprintf(" (it could not start: %s)", p.startHint())
		}
		return finish(runtime.ExitPolicyError, detail+": "+logTail(ex.obs.Output, 600), nil)
	}
	res.Answer = answer
	return finish(runtime.ExitDone, "", nil)
}

// models are the episode's models: threads of the run's model server, or
// in a replay its recorded replies.
func (p *episodePolicy) models() (main model, side func(n int) (model, error), err error) {
	if p.replay != nil {
		return p.replay.main(), p.replay.sideModel, nil
	}
	th, err := openai.NewThread(p.src.llm, p.ep.ID)
	if err != nil {
		return nil, nil, err
	}
	return th, func(n int) (model, error) { return openai.NewThread(p.src.llm, fmt.Sprintf("%s/side/%d", p.ep.ID, n)) }, nil
}

// startHint says why a harness may not start in a sandbox.
func (p *episodePolicy) startHint() string {
	if p.src.install.Dir != "" && !p.src.install.Static {
		return p.src.cfg.harness + "'s executable is linked against glibc: the sandbox's image needs a glibc userland, such as forkline/debian"
	}
	return "the command or its interpreter is missing in the sandbox"
}

// keepLog keeps the harness's output as a blob.
func (p *episodePolicy) keepLog(ex exited) {
	out := ex.obs.Output
	p.record.LogBytes = ex.obs.OutputBytes
	if len(out) == 0 {
		return
	}
	sum := sha256.Sum256(out)
	p.record.LogSHA256 = hex.EncodeToString(sum[:])
	p.blobs = append(p.blobs, schemas.BlobRow{SHA256: p.record.LogSHA256, Media: schemas.MediaText, Data: bytes.Clone(out)})
}

// keepSideCalls keeps the side calls as one JSONL blob.
func (p *episodePolicy) keepSideCalls(side []sideCall) {
	p.record.SideCalls = len(side)
	if len(side) == 0 {
		return
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, c := range side {
		_ = enc.Encode(c)
	}
	sum := sha256.Sum256(b.Bytes())
	p.record.SideCallsSHA256 = hex.EncodeToString(sum[:])
	p.blobs = append(p.blobs, schemas.BlobRow{SHA256: p.record.SideCallsSHA256, Media: schemas.MediaNDJSON, Data: b.Bytes()})
}

// cleanup removes the harness's scratch directory, which a killed
// harness's script could not.
func (p *episodePolicy) cleanup(ctx context.Context, s runtime.Session, home string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, _ = s.Act(cctx, runtime.Action{Kind: runtime.ActExec, Cmd: "rm -rf " + harness.Quote(home), TimeoutMS: 20_000})
}

// observationOf is what a trajectory call brought back of the previous
// reply's calls: the texts of its tool results, joined by a blank line,
// an error when the harness marked one so.
func observationOf(fresh []gateway.Message) runtime.Observation {
	var parts []string
	failed := false
	for _, m := range fresh {
		if m.Role != "tool" {
			continue
		}
		parts = append(parts, m.Content)
		failed = failed || m.IsError
	}
	out := []byte(strings.Join(parts, "\n\n"))
	o := runtime.Observation{Output: out, OutputBytes: int64(len(out)), ExitCode: -1}
	if failed {
		o.Error, o.ErrorKind = true, runtime.ErrActionFail
	}
	return o
}

// messagesJSON is msgs as the harness_input column holds them.
func messagesJSON(msgs []gateway.Message) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if msgs == nil {
		msgs = []gateway.Message{}
	}
	_ = enc.Encode(msgs)
	return strings.TrimSuffix(b.String(), "\n")
}

// logTail is the end of a harness's output, on one line.
func logTail(out []byte, n int) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(out), "\uFFFD"))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "(no output)"
	}
	return s
}
