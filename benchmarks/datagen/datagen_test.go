package datagen_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkline/forkline/benchmarks/datagen"
)

// A generated dataset is a complete forkline dataset: the forkline binary
// verifies it, inspects it, and exports every episode to every target (the
// token targets from the dataset with token records).
func TestGeneratedDatasetThroughTheBinary(t *testing.T) {
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "forkline")
	build := exec.Command("go", "build", "-o", bin, "github.com/forkline/forkline/cmd/forkline")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const n = 37
	for _, tokens := range []bool{false, true} {
		dir := filepath.Join(tmp, "plain")
		targets := []string{"jsonl", "chat-jsonl", "hf", "hf-disk", "verl-sft"}
		if tokens {
			dir = filepath.Join(tmp, "tokens")
			targets = append(targets, "verl-agent", "sft-tokens")
		}
		res, err := datagen.Generate(context.Background(), datagen.Config{Dir: dir, Episodes: n, Tokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		if res.Episodes != n || res.Steps != 3*n {
			t.Fatalf("generated %d episodes, %d steps; want %d, %d", res.Episodes, res.Steps, n, 3*n)
		}
		run := func(args ...string) []byte {
			t.Helper()
			cmd := exec.Command(bin, args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("forkline %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
			}
			return out
		}
		run("verify", dir)
		var summary struct {
			Status   string `json:"status"`
			Episodes int    `json:"episodes"`
		}
		out := run("inspect", dir, "-json")
		if err := json.Unmarshal(out, &summary); err != nil {
			t.Fatalf("inspect -json: %v\n%s", err, out)
		}
		if summary.Status != "complete" || summary.Episodes != n {
			t.Errorf("inspect %s: status %q, %d episodes; want complete, %d\n%s", dir, summary.Status, summary.Episodes, n, out)
		}
		for _, to := range targets {
			dest := filepath.Join(tmp, "out", filepath.Base(dir), to)
			if to == "jsonl" || to == "chat-jsonl" {
				if err := os.MkdirAll(dest, 0o755); err != nil {
					t.Fatal(err)
				}
				dest = filepath.Join(dest, "out.jsonl")
			}
			var rep struct {
				Written map[string]int64 `json:"written"`
			}
			out := run("export", "-in", dir, "-to", to, "-out", dest, "-quiet", "-json")
			if err := json.Unmarshal(out, &rep); err != nil {
				t.Fatalf("export -to %s -json: %v\n%s", to, err, out)
			}
			var rows int64
			for _, w := range rep.Written {
				rows += w
			}
			if rows != n {
				t.Errorf("export -to %s of %s wrote %d rows, want %d: %s", to, dir, rows, n, out)
			}
		}
	}
}
