package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/collect"
	"github.com/forkline/forkline/export"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/internal/oracle"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/policy/openai"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

var updateDocs = flag.Bool("update", false, "rewrite the measured table in docs/tokens.md")

// call is one tool call of a scripted reply: its name and arguments as the
// model writes them (Python json.dumps spacing unless a scenario says).
type scriptedCall struct{ name, args string }

// The three turns of every scenario episode: look, look closer, finish.
var episodeCalls = []scriptedCall{
	{"exec", `{"cmd": "ls -la"}`},
	{"exec", `{"cmd": "cat notes.txt"}`},
	{"done", `{"answer": "listed"}`},
}

// tokenScenario is one row of the token-record table: how vLLM is deployed,
// how the policy is set up, and what the model writes each turn.
type tokenScenario struct {
	name   string
	deploy vllmsim.Config // the parsers and template kwargs vLLM runs with
	opts   map[string]string
	// reply writes turn i's text for the call; nil uses native calls
	// written as Qwen3 writes them.
	reply func(i int, c scriptedCall) vllmsim.Reply
	// cutAt, when set, makes max_tokens end the first reply right after
	// its call's JSON, before </tool_call>.
	cutAt bool
	// chatOnly rows show a chat-mode setting; they have no TITO run.
	chatOnly bool
	// idsLost rows answer a turn without ids that no client can read back
	// (no logprobs either): tito cannot go on, and flags the record
	// (missing_ids) as chat does.
	idsLost bool
}

func nativeCall(c scriptedCall) string {
	return "<tool_call>\n{\"name\": \"" + c.name + "\", \"arguments\": " + c.args + "}\n</tool_call>"
}

func styled(prefix string) func(int, scriptedCall) vllmsim.Reply {
	return func(_ int, c scriptedCall) vllmsim.Reply { return vllmsim.Reply{Text: prefix + nativeCall(c)} }
}

const thinking = "<think>\nI should look at the files first.\n</think>\n\n"

// tokenScenarios are the cases where Qwen3's real template, under vLLM,
// re-renders history differently from what the model generated (see
// internal/oracle/vllmsim's TestDriftTable), the two it does not, and the
// two record breakers that are not template quirks: a turn without ids and
// a tool call cut at max_tokens.
func tokenScenarios() []tokenScenario {
	parserOn := vllmsim.Config{ReasoningParser: true, ToolParser: true}
	parserOff := vllmsim.Config{ToolParser: true}
	return []tokenScenario{
		{name: "reasoning parser off (think block left in content)", deploy: parserOff, reply: styled(thinking)},
		{name: "reasoning parser on", deploy: parserOn, reply: styled(thinking)},
		{name: "reasoning parser on, reasoning not sent back (send_reasoning=false)", deploy: parserOn, reply: styled(thinking),
			opts: map[string]string{"send_reasoning": "false"}, chatOnly: true},
		{name: "empty think block", deploy: parserOff, reply: styled("<think>\n\n</think>\n\n")},
		{name: "enable_thinking=false", deploy: parserOn, reply: styled(""),
			opts: map[string]string{"chat_template_kwargs": `{"enable_thinking": false}`}},
		{name: "compact tool-call JSON", deploy: parserOff, reply: func(_ int, c scriptedCall) vllmsim.Reply {
			return vllmsim.Reply{Text: nativeCall(scriptedCall{c.name, strings.ReplaceAll(c.args, `": "`, `":"`)})}
		}},
		{name: "a sentence before the tool call", deploy: parserOff, reply: styled("I will look at the files.\n")},
		{name: "a non-canonical token split", deploy: parserOff, reply: func(_ int, c scriptedCall) vllmsim.Reply {
			return vllmsim.Reply{Text: nativeCall(c), NonCanonical: true}
		}},
		{name: "text tool mode (observations as user turns), thinking", deploy: parserOn, opts: map[string]string{"tool_mode": "text"},
			reply: func(_ int, c scriptedCall) vllmsim.Reply {
				return vllmsim.Reply{Text: thinking + "{\"name\": \"" + c.name + "\", \"arguments\": " + c.args + "}"}
			}},
		{name: "a turn without token ids", deploy: parserOff, reply: func(i int, c scriptedCall) vllmsim.Reply {
			return vllmsim.Reply{Text: nativeCall(c), OmitTokenIDs: i == 1}
		}},
		{name: "a turn without token ids or logprobs", deploy: parserOff, opts: map[string]string{"logprobs": "false"}, idsLost: true,
			reply: func(i int, c scriptedCall) vllmsim.Reply {
				return vllmsim.Reply{Text: nativeCall(c), OmitTokenIDs: i == 1}
			}},
		{name: "a tool call cut at max_tokens", deploy: parserOff, reply: styled(""), cutAt: true},
	}
}

// episodeRE finds the episode an inference request belongs to: each task's
// instruction names it.
var episodeRE = regexp.MustCompile(`Episode (\d+) of the table`)

// respond answers by episode and turn: the turn is the number of assistant
// turns the prompt already holds.
func (sc tokenScenario) respond(turn vllmsim.Turn) (vllmsim.Reply, error) {
	i := strings.Count(turn.Prompt, "<|im_start|>assistant") - 1
	if i < 0 || i >= len(episodeCalls) {
		return vllmsim.Reply{}, fmt.Errorf("no scripted turn %d", i)
	}
	return sc.reply(i, episodeCalls[i]), nil
}

// cutTokens is the max_tokens that ends the first reply right after its
// call's JSON: vLLM's hermes parser still finds the call there and reports
// finish_reason tool_calls.
func cutTokens(t *testing.T, text string) int {
	t.Helper()
	ctx := context.Background()
	ids, err := oracle.Tokenize(ctx, "qwen3", text)
	require.NoError(t, err)
	for n := len(ids); n > 0; n-- {
		s, err := oracle.Decode(ctx, "qwen3", ids[:n])
		require.NoError(t, err)
		if !strings.Contains(s, "</tool_call>") && strings.HasSuffix(strings.TrimSpace(s), "}}") {
			return n
		}
	}
	t.Fatalf("no cut of %q ends after the JSON", text)
	return 0
}

// tableEpisodes is how many episodes each cell collects.
const tableEpisodes = 6

// cell is one scenario run in one mode: what the dataset says and what the
// server saw.
type cell struct {
	episodes, flagged, exact, wrong, verlRows int
	exits, cuts                               map[string]int
	breaks                                    int // episodes whose server-side ids have a break (prefix or missing ids)
	maxTokens                                 int
}

// runCell collects tableEpisodes episodes of sc in mode (chat or tito)
// against a fresh simulator, exports them to verl-agent, and checks every
// record against the ids the server saw.
func runCell(t *testing.T, sc tokenScenario, mode string) cell {
	t.Helper()
	cfg := sc.deploy
	cfg.Respond = sc.respond
	s := vllmsim.Start(t, cfg)
	tasks := t.TempDir()
	for e := 1; e <= tableEpisodes; e++ {
		spec := fmt.Sprintf("id: ep-%d\ninstruction: Episode %d of the table. List the files in the working directory, then finish.\nlimits:\n  max_steps: 6\n  action_timeout: 20s\nverify:\n  cmd: \"true\"\n", e, e)
		require.NoError(t, os.WriteFile(filepath.Join(tasks, fmt.Sprintf("ep-%d.yaml", e)), []byte(spec), 0o644))
	}
	opts := map[string]string{"base_url": s.URL + "/v1", "model": "Qwen/Qwen3-8B", "tokens": mode, "actions": "exec,done",
		"max_tokens": "200", "retries": "1", "backoff": "1ms", "backoff_max": "2ms", "timeout": "30s"}
	maxTokens := 200
	if sc.cutAt {
		maxTokens = cutTokens(t, sc.reply(0, episodeCalls[0]).Text)
		opts["max_tokens"] = fmt.Sprint(maxTokens)
	}
	for k, v := range sc.opts {
		opts[k] = v
	}
	out := filepath.Join(t.TempDir(), "run")
	log := &lockedBuffer{}
	_, err := collect.Run(context.Background(), collect.Config{
		Tasks: tasks, Out: out, Provider: "local", WorkDir: t.TempDir(), Replicas: 2, Repeats: 1,
		Policy: "openai", PolicyOptions: opts, Capture: capture.DefaultPolicy(), Logger: slog.New(slog.NewTextHandler(log, nil)), Progress: log,
	})
	if (sc.cutAt || (sc.idsLost && mode == "tito")) && errors.Is(err, collect.ErrAllLost) {
		err = nil // every episode ends output_truncated or policy_error, by design: the dataset is complete
	}
	require.NoError(t, err, "%s", log.Bytes())
	if mode == "tito" {
		require.NotContains(t, string(log.Bytes()), "chat mode", "a tito run never falls back")
	}

	ds, err := shard.Open(out)
	require.NoError(t, err)
	c := cell{exits: map[string]int{}, cuts: map[string]int{}, maxTokens: maxTokens}
	byTask := map[string]schemas.EpisodeRow{}
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		byTask[e.TaskID] = e
		c.episodes++
		c.exits[e.ExitReason]++
		if e.TokenDrift {
			c.flagged++
			require.NotNil(t, e.TokenCut, "%s: a cut record says why", e.TaskID)
			c.cuts[*e.TokenCut]++
		}
	}
	steps := map[string][]schemas.StepRow{}
	for st, err := range ds.Steps() {
		require.NoError(t, err)
		steps[st.TaskID] = append(steps[st.TaskID], st)
	}
	served := serverTurns(t, s)
	for task, e := range byTask {
		truth := served[strings.TrimPrefix(task, "ep-")]
		require.NotEmpty(t, truth, "%s: the server saw no turn of %s", mode, task)
		exact, broken, wrong := checkRecord(t, mode, sc, e, truth)
		if exact {
			c.exact++
		}
		if wrong {
			c.wrong++
		}
		if broken {
			c.breaks++
			// Chat mode flags every break; tito has none to flag.
			require.True(t, e.TokenDrift, "%s %s %s: the server's ids break at some turn, the record must be flagged", sc.name, mode, task)
		}
		for _, st := range steps[task] {
			if st.Model == nil {
				continue
			}
			require.NotNil(t, st.TokenPath, "%s: every model turn records its token path", task)
			require.Equal(t, mode, *st.TokenPath)
		}
	}

	dir := filepath.Join(t.TempDir(), "verl")
	rep, err := export.Run(context.Background(), export.Options{Inputs: []string{out}, Target: "verl-agent", Out: dir})
	if err != nil {
		// A target that refuses every episode writes nothing and says so.
		require.ErrorIs(t, err, export.ErrBadInput)
		require.ErrorContains(t, err, "refused every one of the")
		require.Equal(t, c.flagged, c.episodes, "%s %s: only flagged episodes are refused: %v", sc.name, mode, err)
		return c
	}
	for _, n := range rep.Written {
		c.verlRows += int(n)
	}
	require.Equal(t, c.episodes-c.flagged, c.verlRows, "%s %s: verl-agent takes every record not flagged, and no other", sc.name, mode)
	return c
}

// servedTurn is one generation as the server saw it.
type servedTurn struct {
	prompt, generated []int32
	omitted           bool // answered without ids
}

// serverTurns groups the server's generations by the episode their prompt
// names, in the order served.
func serverTurns(t *testing.T, s *vllmsim.Server) map[string][]servedTurn {
	t.Helper()
	out := map[string][]servedTurn{}
	for _, r := range s.Requests() {
		if r.Reply == nil || r.Status != 200 {
			continue
		}
		m := episodeRE.FindStringSubmatch(r.Prompt)
		require.NotNil(t, m, "a generation for no episode: %.200q", r.Prompt)
		out[m[1]] = append(out[m[1]], servedTurn{prompt: r.PromptIDs, generated: r.GeneratedIDs, omitted: r.Reply.OmitTokenIDs})
	}
	return out
}

// checkRecord compares an episode's token record with what the server saw.
// wrong reports a record, cut or whole, that says anything the server did
// not see: an id out of place, a mask that is not 1 exactly on generated
// ids, a logprob the server did not report, a turn past a break. exact
// reports a whole record (not cut) that is right; broken that the ids break
// (a prompt that does not extend the ids before it, or, for a chat client,
// a turn answered without ids).
func checkRecord(t *testing.T, mode string, sc tokenScenario, e schemas.EpisodeRow, truth []servedTurn) (exact, broken, wrong bool) {
	t.Helper()
	where := fmt.Sprintf("%s / %s / %s", sc.name, mode, e.TaskID)
	wrongf := func(format string, args ...any) (bool, bool, bool) {
		t.Logf("%s: wrong record: "+format, append([]any{where}, args...)...)
		return false, broken, true
	}
	// The longest run of turns whose ids carry through unbroken, and the
	// mask they make.
	var seq []int32
	var mask []int32
	unbroken := 0
	for i, tr := range truth {
		// A chat client gets no ids at all from a turn answered without
		// them; a tito client sent the prompt itself and reads the reply's
		// ids off the logprobs, unless there are none (idsLost).
		lost := tr.omitted && (mode == "chat" || sc.idsLost)
		if lost || (i > 0 && (len(tr.prompt) < len(seq) || !slices.Equal(tr.prompt[:len(seq)], seq))) {
			broken = true
			break
		}
		for range tr.prompt[len(seq):] {
			mask = append(mask, 0)
		}
		seq = append(slices.Clone(tr.prompt), tr.generated...)
		for range tr.generated {
			mask = append(mask, 1)
		}
		unbroken = i + 1
	}
	n := int(e.TokenTurns)
	if n > unbroken {
		return wrongf("%d turns recorded, the ids carry through %d", n, unbroken)
	}
	if n == 0 {
		if len(e.ResponseIDs) > 0 || len(e.PromptIDs) > 0 {
			return wrongf("ids without turns")
		}
		return false, broken, false
	}
	first := truth[0].prompt
	last := truth[n-1]
	whole := append(slices.Clone(last.prompt), last.generated...)
	switch {
	case !slices.Equal(first, e.PromptIDs):
		return wrongf("the prompt is not the first prompt the server saw")
	case !slices.Equal(whole[len(first):], e.ResponseIDs):
		return wrongf("the response is not the last prompt and reply the server saw")
	case !slices.Equal(mask[len(first):len(whole)], e.ResponseMask):
		return wrongf("the mask is not 1 exactly on generated ids")
	case sc.opts["logprobs"] == "false":
		// None asked for: none recorded.
		if len(e.ResponseLogprobs) != 0 {
			return wrongf("%d logprobs the server was not asked for", len(e.ResponseLogprobs))
		}
		return !e.TokenDrift && n == len(truth), broken, false
	case len(e.ResponseLogprobs) != len(e.ResponseIDs):
		return wrongf("%d logprobs for %d ids", len(e.ResponseLogprobs), len(e.ResponseIDs))
	}
	// Logprobs: the server's for each generated id (by its position in its
	// own reply), 0 for the template's.
	want := make([]float32, len(e.ResponseIDs))
	for k := 0; k < n; k++ {
		tr := truth[k]
		for j, id := range tr.generated {
			want[len(tr.prompt)+j-len(first)] = float32(vllmsim.Logprob(j, id))
		}
	}
	if !slices.Equal(want, e.ResponseLogprobs) {
		return wrongf("the logprobs are not the server's")
	}
	return !e.TokenDrift && n == len(truth), broken, false
}

// TestTokenRecordScenarios is the table of docs/tokens.md: every scenario
// collected in chat mode and token in, token out, against a server with
// Qwen3's real template and tokenizer. It asserts the goal — token in, token
// out has no drift and every record exact in every scenario; chat mode
// flags every break and never writes a record that says anything the
// server did not see — and that docs/tokens.md shows what it measured
// (-update rewrites the table).
func TestTokenRecordScenarios(t *testing.T) {
	oracle.Require(t)
	var table strings.Builder
	table.WriteString("| scenario | mode | episodes | exits | records cut and flagged | exact records | wrong records | verl-agent rows |\n|---|---|---|---|---|---|---|---|\n")
	for _, sc := range tokenScenarios() {
		modes := []string{"chat", "tito"}
		if sc.chatOnly {
			modes = modes[:1]
		}
		for _, mode := range modes {
			c := runCell(t, sc, mode)
			require.Equal(t, tableEpisodes, c.episodes, "%s %s", sc.name, mode)
			require.Zero(t, c.wrong, "%s %s: no record says anything the server did not see", sc.name, mode)
			switch {
			case mode == "tito" && sc.idsLost:
				// The lost turn ends the episode (it cannot be continued)
				// and cuts the record there, flagged, as chat flags it.
				require.Equal(t, map[string]int{"policy_error": c.episodes}, c.exits, "%s: tito cannot go on without the ids", sc.name)
				require.Equal(t, map[string]int{"missing_ids": c.episodes}, c.cuts, "%s: every record is cut at the lost turn and flagged", sc.name)
				require.Zero(t, c.verlRows, "%s: verl-agent takes no cut record", sc.name)
			case mode == "tito":
				require.Zero(t, c.flagged, "%s: token in, token out never drifts", sc.name)
				require.Equal(t, c.episodes, c.exact, "%s: every tito record is exact", sc.name)
				require.Zero(t, c.breaks, "%s: the server's ids never break under tito", sc.name)
			}
			flagged := fmt.Sprint(c.flagged)
			if c.flagged > 0 {
				flagged += " (" + counts(c.cuts) + ")"
			}
			fmt.Fprintf(&table, "| %s | %s | %d | %s | %s | %d | %d | %d |\n", sc.name, mode, c.episodes, counts(c.exits), flagged, c.exact, c.wrong, c.verlRows)
		}
	}
	t.Log("\n" + table.String())
	checkDocTable(t, "../../docs/tokens.md", table.String())
}

// counts writes "a 2, b 1", sorted by key.
func counts(m map[string]int) string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

const (
	tableBegin = "<!-- begin: TestTokenRecordScenarios -->\n"
	tableEnd   = "<!-- end: TestTokenRecordScenarios -->\n"
)

// checkDocTable requires the doc's generated block to be table, or
// rewrites it under -update.
func checkDocTable(t *testing.T, path, table string) {
	t.Helper()
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	i := bytes.Index(doc, []byte(tableBegin))
	j := bytes.Index(doc, []byte(tableEnd))
	require.True(t, i >= 0 && j > i, "%s has no %q ... %q block", path, tableBegin, tableEnd)
	got := string(doc[i+len(tableBegin) : j])
	if *updateDocs {
		out := append(append(append([]byte{}, doc[:i+len(tableBegin)]...), table...), doc[j:]...)
		require.NoError(t, os.WriteFile(path, out, 0o644))
		return
	}
	require.Equal(t, table, got, "%s does not show what was measured; run go test ./policy/openai -run TestTokenRecordScenarios -update", path)
}

// TestNewTurnIsExact proves the new-turn technique of token in, token out
// against Qwen3's real template and tokenizer: in every scenario, the ids
// the policy appended for the tool results (or the user turn, in text mode)
// are exactly the ids that follow the reply's <|im_end|> when the real
// template renders the whole conversation — found in the rendered text,
// without any of the policy's cutting, and tokenized by the real tokenizer.
// It also shows why the cut is at the stop token: the other known technique,
// the ids of [assistant placeholder] + new messages with the generation
// prompt past those of [assistant placeholder] alone, loses the "\n" the
// template writes after <|im_end|>, which the model never generated.
func TestNewTurnIsExact(t *testing.T) {
	oracle.Require(t)
	ctx := context.Background()
	imEnd, err := oracle.TokenID(ctx, "qwen3", "<|im_end|>")
	require.NoError(t, err)
	newline, err := oracle.Tokenize(ctx, "qwen3", "\n")
	require.NoError(t, err)
	scenarios := tokenScenarios()
	scenarios = append(scenarios,
		tokenScenario{name: "two tool calls in one reply", deploy: vllmsim.Config{ToolParser: true},
			reply: func(i int, c scriptedCall) vllmsim.Reply {
				return vllmsim.Reply{Text: nativeCall(c) + "\n" + nativeCall(scriptedCall{"exec", `{"cmd": "pwd"}`})}
			}},
		tokenScenario{name: "an observation that spells <|im_end|>", deploy: vllmsim.Config{ToolParser: true}, reply: styled("")},
	)
	for _, sc := range scenarios {
		if sc.cutAt || sc.chatOnly {
			continue // a cut reply has no next turn; chat-only rows have no tito run
		}
		t.Run(sc.name, func(t *testing.T) {
			cfg := sc.deploy
			cfg.Respond = sc.respond
			s := vllmsim.Start(t, cfg)
			opts := map[string]string{"base_url": s.URL + "/v1", "tokens": "tito", "actions": "exec,done", "max_tokens": "200",
				"backoff": "1ms", "backoff_max": "2ms"}
			for k, v := range sc.opts {
				opts[k] = v
			}
			pcfg, err := openai.ParseOptions(opts)
			require.NoError(t, err)
			p, err := openai.New(pcfg)
			require.NoError(t, err)
			output := "notes.txt\n"
			if strings.Contains(sc.name, "spells") {
				output = "a line that spells <|im_end|> and <|im_start|>user, as a file may\n"
			}
			h := runtime.History{Instruction: "Episode 1 of the table. List the files in the working directory, then finish."}
			d, err := p.Decide(ctx, h)
			require.NoError(t, err)
			require.Empty(t, d.Stop, d.Detail)
			h.Steps = append(h.Steps, runtime.Step{Action: d.Action, Model: d.Model, Observation: runtime.Observation{Output: []byte(output)}})
			d2, err := p.Decide(ctx, h)
			require.NoError(t, err)

			// What the policy sent: turn 1's ids, then the new turn.
			gen1 := d.Model
			require.Equal(t, imEnd, gen1.ResponseIDs[len(gen1.ResponseIDs)-1], "the reply ends with the stop token, kept")
			prefix := append(slices.Clone(gen1.PromptIDs), gen1.ResponseIDs...)
			require.True(t, slices.Equal(d2.Model.PromptIDs[:len(prefix)], prefix))
			appended := d2.Model.PromptIDs[len(prefix):]

			// The real conversation, as a chat client holds it: rebuilt from
			// what the policy sent the renderer.
			var renders []vllmsim.Received
			for _, r := range s.Requests() {
				if r.Path == "/tokenize" && r.Status == 200 && !strings.Contains(string(r.Body), "forkline probe") {
					renders = append(renders, r)
				}
			}
			require.Len(t, renders, 3, "the first prompt, then the short conversation with and without the new turn")
			var first, base, full struct {
				Messages []json.RawMessage `json:"messages"`
				Tools    json.RawMessage   `json:"tools"`
				Kwargs   map[string]any    `json:"chat_template_kwargs"`
			}
			require.NoError(t, json.Unmarshal(renders[0].Body, &first))
			require.NoError(t, json.Unmarshal(renders[1].Body, &base))
			require.NoError(t, json.Unmarshal(renders[2].Body, &full))
			require.Len(t, base.Messages, 2)
			fresh := full.Messages[2:]
			real := append(append(slices.Clone(first.Messages), base.Messages[1]), fresh...)

			// The reference: render it all with the real template; the new
			// turn is the text after the <|im_end|> that closes the reply
			// (the last assistant turn before the generation prompt).
			text := renderText(t, s, real, first.Tools, first.Kwargs, true)
			genPrompt := strings.LastIndex(text, "<|im_start|>assistant")
			replyAt := strings.LastIndex(text[:genPrompt], "<|im_start|>assistant")
			end := strings.Index(text[replyAt:], "<|im_end|>")
			require.True(t, replyAt >= 0 && end > 0, "no reply in %q", text)
			want, err := oracle.Tokenize(ctx, "qwen3", text[replyAt+end+len("<|im_end|>"):])
			require.NoError(t, err)
			require.Equal(t, want, appended, "the new turn is exactly what the real template writes after the reply")

			// The placeholder-difference technique loses the template's
			// "\n" after <|im_end|>.
			placeholder := []json.RawMessage{json.RawMessage(`{"role":"assistant","content":"."}`)}
			b := tokenizeIDs(t, s, placeholder, first.Tools, first.Kwargs, false)
			f := tokenizeIDs(t, s, append(slices.Clone(placeholder), fresh...), first.Tools, first.Kwargs, true)
			require.True(t, slices.Equal(f[:len(b)], b))
			naive := f[len(b):]
			require.NotEqual(t, want, naive)
			require.Equal(t, append(slices.Clone(newline), naive...), want, "what it loses is the \\n after <|im_end|>, no more")
		})
	}
}

// renderText has the simulator render a conversation as vLLM prepares and
// renders it, and returns the text its real template wrote.
func renderText(t *testing.T, s *vllmsim.Server, msgs []json.RawMessage, tools json.RawMessage, kwargs map[string]any, gen bool) string {
	t.Helper()
	tokenizeIDs(t, s, msgs, tools, kwargs, gen)
	rec, ok := s.Last("/tokenize")
	require.True(t, ok)
	return rec.Prompt
}

func tokenizeIDs(t *testing.T, s *vllmsim.Server, msgs []json.RawMessage, tools json.RawMessage, kwargs map[string]any, gen bool) []int32 {
	t.Helper()
	body := map[string]any{"messages": msgs, "add_generation_prompt": gen}
	if len(tools) > 0 && string(tools) != "null" {
		body["tools"] = tools
	}
	if kwargs != nil {
		body["chat_template_kwargs"] = kwargs
	}
	b, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post(s.URL+"/tokenize", "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Tokens []int32 `json:"tokens"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, 200, resp.StatusCode)
	return out.Tokens
}

// TestCollectTITOKeepsTheKeyOut: a token-in-token-out run against a vLLM
// started with --api-key sends the key to every route that guards with it
// (/v1/models, /v1/completions) — the run could not work otherwise — and the
// key reaches no file of the dataset, Parquet bytes included, and not the
// log.
func TestCollectTITOKeepsTheKeyOut(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{APIKey: apiKey, ToolParser: true, ServeProps: true,
		Respond: func(turn vllmsim.Turn) (vllmsim.Reply, error) {
			if strings.Count(turn.Prompt, "<|im_start|>assistant") > 1 {
				return vllmsim.Reply{Text: nativeCall(scriptedCall{"done", `{"answer": "` + canary + `"}`})}, nil
			}
			return vllmsim.Reply{Text: nativeCall(scriptedCall{"exec", `{"cmd": "echo hi"}`})}, nil
		}})
	t.Setenv("FORKLINE_E2E_KEY", apiKey)
	tasks := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(tasks, "t.yaml"), []byte("id: t\ninstruction: say hi\n"), 0o644))
	out := filepath.Join(t.TempDir(), "run")
	log := &lockedBuffer{}
	_, err := collect.Run(context.Background(), collect.Config{
		Tasks: tasks, Out: out, Provider: "local", WorkDir: t.TempDir(), Replicas: 1, Repeats: 2, Policy: "openai",
		PolicyOptions: map[string]string{"base_url": s.URL + "/v1", "tokens": "tito", "api_key_env": "FORKLINE_E2E_KEY",
			"actions": "exec,done", "max_tokens": "100"},
		Capture: capture.DefaultPolicy(), Shards: shard.Config{Compression: "none"}, Logger: slog.New(slog.NewTextHandler(log, nil)), Progress: log,
	})
	require.NoError(t, err, "%s", log.Bytes())
	guarded := 0
	for _, r := range s.Requests() {
		require.NotEqual(t, 401, r.Status, "%s reached the server without the key", r.Path)
		if strings.HasPrefix(r.Path, "/v1") {
			guarded++
		}
	}
	require.Positive(t, guarded)
	sawCanary := false
	require.NoError(t, filepath.WalkDir(out, func(p string, de fs.DirEntry, err error) error {
		require.NoError(t, err)
		if de.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NotContains(t, string(b), apiKey, "the API key leaked into %s", p)
		require.NotContains(t, string(b), apiKey[3:], "part of the API key leaked into %s", p)
		sawCanary = sawCanary || bytes.Contains(b, []byte(canary))
		return nil
	}))
	require.True(t, sawCanary, "the search sees into the Parquet files")
	require.NotContains(t, string(log.Bytes()), apiKey)
	eps, _ := readRun(t, out)
	require.Equal(t, "done", eps["t"].ExitReason)
}
