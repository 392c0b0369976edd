// Command agents benchmarks what -policy agent adds to an episode, in one
// run, against the baseline a user would otherwise have:
//
//   - the gateway's added latency per model call: the same conversation
//     sent straight to a model server by the openai policy's thread (the
//     baseline: what a policy pays anyway) and sent by a harness to the
//     gateway in each API (Chat Completions, Anthropic Messages, OpenAI
//     Responses; streaming as harnesses do, and not), which translates it
//     and forwards it through the same thread. The server is a loopback
//     stub that answers at once, so the difference is the gateway's own
//     cost: HTTP, translation, SSE. The conversation grows a turn per call
//     from a 30 KB system prompt and 12 tools, as a real harness's does.
//   - a harness episode's reset: a fork of the task's golden checkpoint
//     (the harness's install and forkline's relay mounted read-only, as
//     -policy agent mounts them) against a fresh container per rollout
//     from the base image, with the task's files and setup, what a
//     harness runner that starts a new container for every rollout pays;
//     each until a first command has run in it. On docker, and on local
//     (an overlayfs fork against a fresh workspace).
//
// Each is printed with its p50 and p95 and its p50 as a ratio to its
// baseline. -md writes benchmarks/agents/RESULTS.md.
//
//	go run ./benchmarks/agents -n 200 -reset-n 20 -md benchmarks/agents/RESULTS.md
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/forkline/forkline/gateway"
	"github.com/forkline/forkline/harness"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/providers"
	_ "github.com/forkline/forkline/providers/all"
	"github.com/forkline/forkline/runtime"
)

type measure struct {
	Group string  `json:"group"`
	Name  string  `json:"name"`
	What  string  `json:"what"`
	N     int     `json:"n"`
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	Ratio float64 `json:"ratio_to_baseline"`
}

func main() {
	n := flag.Int("n", 200, "model calls per gateway measure")
	resetN := flag.Int("reset-n", 20, "resets per reset measure")
	image := flag.String("image", "forkline/busybox", "the docker image of the reset measures")
	md := flag.String("md", "", "write a Markdown report to `FILE`")
	noDocker := flag.Bool("no-docker", false, "skip the docker reset measures")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	load0 := loadAverage()
	var ms []measure
	g, err := gatewayLatency(ctx, *n)
	if err != nil {
		fail(err)
	}
	ms = append(ms, g...)
	provs := []string{"local"}
	if !*noDocker {
		provs = append(provs, "docker")
	}
	for _, p := range provs {
		for _, setup := range []struct{ name, cmd string }{{"fix-sum", fixSumSetup}, {"setup 2s", slowSetup}} {
			r, err := resets(ctx, p, *image, *resetN, setup.name, setup.cmd)
			if err != nil {
				fail(fmt.Errorf("%s resets: %w", p, err))
			}
			ms = append(ms, r...)
		}
	}
	printTable(os.Stdout, ms)
	if *md != "" {
		if err := writeMD(*md, ms, load0, loadAverage(), *image); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchmarks/agents:", err)
	if errors.Is(err, context.Canceled) {
		os.Exit(130)
	}
	os.Exit(1)
}

// stubServer answers chat completions at once, in vLLM's shape (with token
// ids), always with one tool call.
func stubServer() (*http.Server, string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"stub","object":"model","owned_by":"vllm"}]}`)
	})
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"stub","prompt_token_ids":[1,2,3],`+
			`"choices":[{"index":0,"finish_reason":"tool_calls","token_ids":[4,5,6],"message":{"role":"assistant","content":null,`+
			`"tool_calls":[{"id":"call_x","type":"function","function":{"name":"Bash","arguments":"{\"command\":\"ls\"}"}}]}}],`+
			`"usage":{"prompt_tokens":3,"completion_tokens":3}}`)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	return srv, "http://" + l.Addr().String(), nil
}

// forwarder is the gateway handler of the measure: every call forwarded
// through one thread, as the agent policy's recorder forwards a
// trajectory's calls (its bookkeeping aside).
type forwarder struct {
	th   *openai.Thread
	sent int
}

func (f *forwarder) Call(ctx context.Context, c *gateway.Call) (*gateway.Reply, error) {
	fresh := c.Messages[f.sent:]
	msgs := make([]openai.ThreadMessage, len(fresh))
	for i, m := range fresh {
		msgs[i] = openai.ThreadMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, runtime.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
		}
	}
	tools := make([]json.RawMessage, len(c.Tools))
	for i, t := range c.Tools {
		tools[i] = t.ChatJSON()
	}
	rep, err := f.th.Call(ctx, msgs, tools, false)
	if err != nil {
		return nil, err
	}
	f.sent = len(c.Messages) + 1
	out := &gateway.Reply{Content: rep.Content, Finish: rep.Finish, PromptTokens: 3, CompletionTokens: 3}
	for _, c := range rep.Calls {
		out.Calls = append(out.Calls, gateway.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return out, nil
}

func (f *forwarder) Refused(string, error) {}

// conversation is a harness-sized conversation of turns calls: a 30 KB
// system prompt, 12 tools of 1 KB, and a tool call and its 2 KB result
// per earlier call.
func conversation(turns int) (sys string, tools []gateway.Tool, msgs []gateway.Message) {
	sys = strings.Repeat("You are an agent. Follow the rules of the harness carefully. ", 500)
	for i := range 12 {
		tools = append(tools, gateway.Tool{Name: fmt.Sprintf("Tool%d", i), Description: strings.Repeat("d", 1000),
			Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)})
	}
	msgs = []gateway.Message{{Role: "system", Content: sys}, {Role: "user", Content: "Fix the bug."}}
	for range turns {
		const id = "call_x" // the stub's
		msgs = append(msgs, gateway.Message{Role: "assistant", ToolCalls: []gateway.ToolCall{{ID: id, Name: "Bash", Arguments: `{"command":"ls"}`}}},
			gateway.Message{Role: "tool", ToolCallID: id, Content: strings.Repeat("output line\n", 170)})
	}
	return
}

// body is a harness's request for the conversation of turns calls in api.
func body(api string, turns int, stream bool) []byte {
	sys, tools, msgs := conversation(turns)
	switch api {
	case gateway.APIChat:
		var ts []json.RawMessage
		for _, t := range tools {
			ts = append(ts, t.ChatJSON())
		}
		var ms []map[string]any
		for _, m := range msgs {
			x := map[string]any{"role": m.Role, "content": m.Content}
			if m.ToolCallID != "" {
				x["tool_call_id"] = m.ToolCallID
			}
			for _, c := range m.ToolCalls {
				x["content"] = nil
				x["tool_calls"] = []any{map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}}}
			}
			ms = append(ms, x)
		}
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": ms, "tools": ts, "stream": stream})
		return b
	case gateway.APIMessages:
		var ts []map[string]any
		for _, t := range tools {
			ts = append(ts, map[string]any{"name": t.Name, "description": t.Description, "input_schema": t.Parameters})
		}
		var ms []map[string]any
		for _, m := range msgs[1:] {
			switch {
			case m.Role == "user":
				ms = append(ms, map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": m.Content}}})
			case m.Role == "assistant":
				ms = append(ms, map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": m.ToolCalls[0].ID, "name": "Bash", "input": map[string]string{"command": "ls"}}}})
			default:
				ms = append(ms, map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": m.ToolCallID, "content": m.Content}}})
			}
		}
		b, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 1000, "system": sys, "messages": ms, "tools": ts, "stream": stream})
		return b
	default:
		var ts []map[string]any
		for _, t := range tools {
			ts = append(ts, map[string]any{"type": "function", "name": t.Name, "description": t.Description, "parameters": t.Parameters})
		}
		var items []map[string]any
		for _, m := range msgs[1:] {
			switch m.Role {
			case "user":
				items = append(items, map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": m.Content}}})
			case "assistant":
				items = append(items, map[string]any{"type": "function_call", "call_id": m.ToolCalls[0].ID, "name": "Bash", "arguments": m.ToolCalls[0].Arguments})
			default:
				items = append(items, map[string]any{"type": "function_call_output", "call_id": m.ToolCallID, "output": m.Content})
			}
		}
		b, _ := json.Marshal(map[string]any{"model": "m", "instructions": sys, "input": items, "tools": ts, "stream": stream, "store": false})
		return b
	}
}

// gatewayLatency measures the calls direct and through the gateway.
func gatewayLatency(ctx context.Context, n int) ([]measure, error) {
	srv, url, err := stubServer()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	src, err := openai.Open(policy.Options{Params: map[string]string{"base_url": url + "/v1", "tokens": "chat", "server": "vllm"}})
	if err != nil {
		return nil, err
	}
	const turns = 20 // conversations cycle through 1..20 calls of history
	// The baseline: the thread straight to the server, the same
	// conversations.
	var direct []time.Duration
	for i := range n {
		th, err := openai.NewThread(src, "")
		if err != nil {
			return nil, err
		}
		_, tools, msgs := conversation(i % turns)
		var tm []openai.ThreadMessage
		for _, m := range msgs {
			x := openai.ThreadMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
			for _, c := range m.ToolCalls {
				x.ToolCalls = append(x.ToolCalls, runtime.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
			}
			tm = append(tm, x)
		}
		var ts []json.RawMessage
		for _, t := range tools {
			ts = append(ts, t.ChatJSON())
		}
		began := time.Now()
		if _, err := th.Call(ctx, tm, ts, false); err != nil {
			return nil, err
		}
		direct = append(direct, time.Since(began))
	}
	base := stats(direct)
	out := []measure{{Group: "gateway", Name: "direct", What: "the openai policy's thread straight to the model server (the baseline)", N: n, P50MS: base[0], P95MS: base[1], Ratio: 1}}

	gw := gateway.New(gateway.Config{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer l.Close()
	go gw.Serve(l)
	client := &http.Client{}
	for _, c := range []struct {
		api, path string
		stream    bool
	}{
		{gateway.APIChat, "/v1/chat/completions", false},
		{gateway.APIChat, "/v1/chat/completions", true},
		{gateway.APIMessages, "/v1/messages?beta=true", true},
		{gateway.APIResponses, "/v1/responses", true},
	} {
		var ds []time.Duration
		for i := range n {
			th, err := openai.NewThread(src, "")
			if err != nil {
				return nil, err
			}
			key, unregister := gw.Register(&forwarder{th: th})
			b := body(c.api, i%turns, c.stream)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+l.Addr().String()+c.path, bytes.NewReader(b))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			began := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				return nil, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ds = append(ds, time.Since(began))
			unregister()
			if resp.StatusCode != 200 {
				return nil, fmt.Errorf("%s: status %d", c.path, resp.StatusCode)
			}
		}
		s := stats(ds)
		mode := "non-streaming"
		if c.stream {
			mode = "streaming (SSE)"
		}
		out = append(out, measure{Group: "gateway", Name: c.api + map[bool]string{true: "+sse", false: ""}[c.stream],
			What: fmt.Sprintf("a harness's %s call to the gateway, %s, translated and forwarded through the same thread", c.api, mode),
			N:    n, P50MS: s[0], P95MS: s[1], Ratio: s[0] / base[0]})
	}
	return out, nil
}

// The task of the reset measures: examples/tasks/fix-sum.yaml's files and
// setup.
var fixSumFiles = map[string][]byte{"sum.sh": []byte("#!/bin/sh\nn=$1; i=1; total=0\nwhile [ \"$i\" -lt \"$n\" ]; do\n  total=$((total + i)); i=$((i + 1))\ndone\necho \"$total\"\n")}

const fixSumSetup = "chmod +x sum.sh"

// slowSetup stands for a task whose setup does work (installs, builds):
// about 2 s and files left behind, as benchmarks/docker's recreate.
const slowSetup = `chmod +x sum.sh; sleep 2; mkdir -p src; i=0; while [ $i -lt 20 ]; do head -c 4096 /dev/zero | tr '\000' x > src/file$i.txt; i=$((i+1)); done`

// resets measures a harness episode's reset on provider name.
func resets(ctx context.Context, name, image string, n int, setupName, setup string) ([]measure, error) {
	dir, err := os.MkdirTemp("", "forkline-bench-agents-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	params := map[string]string{}
	if name == "docker" {
		params["image"] = image
	}
	p, err := providers.Open(ctx, name, providers.Options{Dir: dir, Params: params})
	if err != nil {
		return nil, err
	}
	defer p.Close(context.WithoutCancel(ctx))
	spec := providers.Spec{Files: fixSumFiles}
	mounted := "nothing (local commands see the host)"
	if name == "docker" {
		// What -policy agent mounts: the harness's install, a static
		// forkline, the gateway's socket directory.
		install := dir
		if in, err := harness.Find(harness.Codex, ""); err == nil {
			install = in.Dir
		}
		exe, _ := os.Executable()
		sock := dir + "/sock"
		_ = os.MkdirAll(sock, 0o755)
		spec.Mounts = []providers.Mount{{Source: install, Target: "/opt/forkline/harness"}, {Source: exe, Target: "/opt/forkline/bin/forkline"},
			{Source: sock, Target: "/run/forkline-gateway"}}
		mounted = "the harness install, forkline and the gateway socket directory, read-only"
	}
	ready := func(sb providers.Sandbox) error {
		obs, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: "test -x sum.sh", TimeoutMS: 30_000})
		if err == nil && obs.ExitCode != 0 {
			err = fmt.Errorf("the sandbox is not ready: %s", obs.Output)
		}
		return err
	}
	// Fresh: a new sandbox from the base image per rollout, files, setup.
	var fresh []time.Duration
	for range n {
		began := time.Now()
		sb, err := p.Create(ctx, spec)
		if err != nil {
			return nil, err
		}
		if _, err := sb.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: setup, TimeoutMS: 30_000}); err != nil {
			return nil, err
		}
		if err := ready(sb); err != nil {
			return nil, err
		}
		fresh = append(fresh, time.Since(began))
		_ = sb.Close(ctx)
	}
	// Fork: the golden once, then a fork per rollout.
	golden, err := p.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	if _, err := golden.Act(ctx, runtime.Action{Kind: runtime.ActExec, Cmd: setup, TimeoutMS: 30_000}); err != nil {
		return nil, err
	}
	cp, err := p.Checkpoint(ctx, golden, "bench-agents")
	if err != nil {
		return nil, err
	}
	_ = golden.Close(ctx)
	var forks []time.Duration
	for range n {
		began := time.Now()
		sb, err := p.Fork(ctx, cp)
		if err != nil {
			return nil, err
		}
		if err := ready(sb); err != nil {
			return nil, err
		}
		forks = append(forks, time.Since(began))
		_ = sb.Close(ctx)
	}
	_ = p.Release(ctx, cp)
	fs, ks := stats(fresh), stats(forks)
	return []measure{
		{Group: "reset/" + name + " (" + setupName + ")", Name: "fresh", What: "a new sandbox per rollout from the base image: create, the task's files, its setup (" + setupName + "), a first command (the baseline); mounted: " + mounted, N: n, P50MS: fs[0], P95MS: fs[1], Ratio: 1},
		{Group: "reset/" + name + " (" + setupName + ")", Name: "fork", What: "a fork of the task's golden checkpoint (its setup done once), a first command; mounted: " + mounted, N: n, P50MS: ks[0], P95MS: ks[1], Ratio: ks[0] / fs[0]},
	}, nil
}

// stats is the p50 and p95 in milliseconds.
func stats(ds []time.Duration) [2]float64 {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) float64 {
		i := int(q * float64(len(s)-1))
		return float64(s[i]) / float64(time.Millisecond)
	}
	return [2]float64{at(0.5), at(0.95)}
}

func printTable(w io.Writer, ms []measure) {
	for _, m := range ms {
		fmt.Fprintf(w, "%-16s %-28s n=%-4d p50 %9.3f ms  p95 %9.3f ms  ×%.3f\n", m.Group, m.Name, m.N, m.P50MS, m.P95MS, m.Ratio)
	}
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Fields(string(b))[0]
}

func writeMD(path string, ms []measure, load0, load1, image string) error {
	var b strings.Builder
	kernel, _ := exec.Command("uname", "-r").Output()
	fmt.Fprintf(&b, "# Agent harness episodes: the gateway's added latency and the reset\n\n")
	fmt.Fprintf(&b, "Command: `go run ./benchmarks/agents %s`  \n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "Date: %s  \n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Machine: %s/%s, kernel %s, %d CPUs; %s  \n", goruntime.GOOS, goruntime.GOARCH, strings.TrimSpace(string(kernel)), goruntime.NumCPU(), goruntime.Version())
	fmt.Fprintf(&b, "Load average (1 min): %s at the start, %s at the end  \nDocker image of the reset measures: %s\n\n", load0, load1, image)
	fmt.Fprintf(&b, "| group | measure | what | n | p50 ms | p95 ms | p50 / baseline |\n|---|---|---|---:|---:|---:|---:|\n")
	for _, m := range ms {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.3f | %.3f | %.3f |\n", m.Group, m.Name, m.What, m.N, m.P50MS, m.P95MS, m.Ratio)
	}
	var direct float64
	for _, m := range ms {
		if m.Group == "gateway" && m.Name == "direct" {
			direct = m.P50MS
		}
	}
	b.WriteString("\nAdded by the gateway per call (p50 through it minus p50 direct):")
	for _, m := range ms {
		if m.Group == "gateway" && m.Name != "direct" {
			fmt.Fprintf(&b, " %s %+.3f ms;", m.Name, m.P50MS-direct)
		}
	}
	b.WriteString("\n\n" + notes)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

const notes = `Samples run one after another in one process, on a machine that may have other work; compare
the ratios within one run, not absolute times across machines.

The gateway measures send the same conversations (1 to 20 earlier calls of history, a 30 KB
system prompt, 12 tools of 1 KB, results of 2 KB) to a loopback stub that answers at once: what
they differ by is the gateway's own cost (a harness's HTTP request, its body translated into the
canonical conversation, the reply translated back, as server-sent events for a streaming call).
A real model's generation takes hundreds of milliseconds to seconds per call, against which this
is the overhead. The token-in-token-out renders (/tokenize) a real server does are the same with
or without the gateway, and are not here.

The reset measures end when a first command has run in the sandbox. "fresh" is what a harness
runner that starts a new container (or workspace) for every rollout pays before the harness
starts; "fork" is what -policy agent pays: the task's golden checkpoint, its setup done once,
forked. The harness itself is mounted read-only in both (forkline installs it once, forkline
images -agent): a runner that installs it into each fresh container pays an npm install on top
(tens of seconds for these packages). fix-sum's setup is one chmod, so on docker a fork and a
fresh container cost about the same (both are a container start); "setup 2s" stands for a task
whose setup does work (installs, builds): a fresh container pays it on every rollout, a fork
never.
`
