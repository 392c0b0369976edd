package gateway_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkline/forkline/gateway"
	"github.com/forkline/forkline/harness"
	"github.com/forkline/forkline/internal/agenttest"
)

// scripted answers an episode's calls from a script: side calls (no
// tools: opencode's title) get a title, the main loop's first call runs
// the harness's shell tool, the next ones end the episode.
type scripted struct {
	h      string
	mu     sync.Mutex
	main   []*gateway.Call
	side   []*gateway.Call
	refuse []error
	callID string
}

func (s *scripted) Call(_ context.Context, c *gateway.Call) (*gateway.Reply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(c.Tools) == 0 {
		s.side = append(s.side, c)
		return &gateway.Reply{Content: "Making a file", Finish: gateway.FinishStop, PromptTokens: 3, CompletionTokens: 3}, nil
	}
	s.main = append(s.main, c)
	if len(s.main) == 1 {
		name, args := agenttest.Shell(s.h, "echo made-by-"+s.h+" > made.txt && echo wrote it")
		s.callID = "call_" + strings.ReplaceAll(s.h, "-", "_") + "_1"
		return &gateway.Reply{Reasoning: "Write the file first.", Calls: []gateway.ToolCall{{ID: s.callID, Name: name, Arguments: args}},
			Finish: gateway.FinishToolCalls, PromptTokens: 100, CompletionTokens: 20}, nil
	}
	return &gateway.Reply{Content: "The file is written.", Finish: gateway.FinishStop, PromptTokens: 120, CompletionTokens: 5}, nil
}

func (s *scripted) Refused(api string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = append(s.refuse, err)
}

// TestHarnessesSpeakThroughTheGateway runs each real harness, installed
// from npm, against the gateway: its requests must translate, the replies
// it gets must be ones it acts on (it runs the shell tool the script
// calls, in its own tool's name and argument shape), and its next call
// must send the tool's result back under the call's id.
func TestHarnessesSpeakThroughTheGateway(t *testing.T) {
	for _, h := range harness.Installable() {
		t.Run(h, func(t *testing.T) {
			in := agenttest.Require(t, h)
			t.Parallel()
			gw := gateway.New(gateway.Config{Models: []string{"test-model"}})
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go gw.Serve(l)
			s := &scripted{h: h}
			cred, unregister := gw.Register(s)
			defer unregister()

			ws := t.TempDir()
			home := filepath.Join(t.TempDir(), "home")
			script, err := harness.Script(harness.Launch{Harness: h, Binary: in.BinaryPath(), Instruction: "Make the file made.txt.",
				BaseURL: "http://" + l.Addr().String(), Credential: cred, Model: "test-model", Home: home})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", "-c", script)
			cmd.Dir = ws
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s exited with %v:\n%s", h, err, tail(out))
			}
			got, err := os.ReadFile(filepath.Join(ws, "made.txt"))
			if err != nil || strings.TrimSpace(string(got)) != "made-by-"+h {
				t.Fatalf("made.txt = %q (%v); the harness did not run the scripted shell call\n%s", got, err, tail(out))
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.refuse) > 0 {
				t.Fatalf("the gateway refused requests: %v", s.refuse)
			}
			if len(s.main) < 2 {
				t.Fatalf("%d main-loop calls, want at least 2", len(s.main))
			}
			if want := in.API; s.main[0].API != want {
				t.Errorf("API %q, want %q", s.main[0].API, want)
			}
			second := s.main[1].Messages
			call, result := -1, -1
			for i, m := range second {
				for _, tc := range m.ToolCalls {
					if tc.ID == s.callID {
						call = i
						name, args := agenttest.Shell(h, "")
						if tc.Name != name {
							t.Errorf("the echoed call names %q, want %q", tc.Name, name)
						}
						var a, b map[string]any
						if json.Unmarshal([]byte(tc.Arguments), &a) != nil || json.Unmarshal([]byte(args), &b) != nil {
							t.Errorf("echoed arguments %q are not a JSON object", tc.Arguments)
						}
					}
				}
				if m.Role == gateway.RoleTool && m.ToolCallID == s.callID {
					result = i
					if !strings.Contains(m.Content, "wrote it") {
						t.Errorf("the tool result %q does not hold the command's output", m.Content)
					}
				}
			}
			if call < 0 || result < call {
				t.Fatalf("the second call does not echo call %s and then its result:\n%s", s.callID, dump(second))
			}
			t.Logf("%s: %d main calls, %d side calls, %d tools, dropped %v", h, len(s.main), len(s.side), len(s.main[0].Tools), s.main[0].Dropped)
		})
	}
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func dump(msgs []gateway.Message) string {
	var b strings.Builder
	for i, m := range msgs {
		c := m.Content
		if len(c) > 120 {
			c = c[:120] + "..."
		}
		b.WriteString(strings.Join([]string{string(rune('0' + i%10)), m.Role, m.ToolCallID, c}, " | "))
		for _, tc := range m.ToolCalls {
			b.WriteString(" [call " + tc.ID + " " + tc.Name + " " + tc.Arguments + "]")
		}
		b.WriteString("\n")
	}
	return b.String()
}
