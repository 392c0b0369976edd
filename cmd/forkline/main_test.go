package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// forklineBin is the forkline binary, built once for the tests that run it
// as a process (signals, kills, printed commands run through a shell).
var forklineBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "forkline-bin-")
	if err != nil {
		panic(err)
	}
	forklineBin = filepath.Join(dir, "forkline")
	// Statically linked, as make build builds it: -policy agent runs it
	// inside docker sandboxes as the relay.
	build := exec.Command("go", "build", "-o", forklineBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	if err != nil {
		panic("building forkline: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// forklineProcess is the command forkline SUBCOMMAND args..., not started.
func forklineProcess(subcommand string, args ...string) *exec.Cmd {
	return exec.Command(forklineBin, append([]string{subcommand}, args...)...)
}

// collectProcess is forkline collect args..., not started.
func collectProcess(args ...string) *exec.Cmd { return forklineProcess("collect", args...) }

// collectInProcess runs forkline collect args in this process, writing to
// os.Stdout and os.Stderr as they are when it is called.
func collectInProcess(args []string) int { return run(append([]string{"collect"}, args...)) }

// result is what an in-process invocation printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// execute runs forkline args in this process under ctx (no signal
// handling), capturing its output.
func execute(ctx context.Context, args ...string) result {
	var out, errb bytes.Buffer
	code := app().Execute(ctx, args, &out, &errb)
	return result{code, out.String(), errb.String()}
}
