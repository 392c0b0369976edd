package episode

import (
	"sort"
	"time"

	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/task"
)

// TaskLabel is the label every sandbox of a task carries, naming the task,
// for the people who look at a backend's objects (docker ps --filter
// label=forkline.task=ID). Nothing in forkline reads it.
const TaskLabel = "forkline.task"

// CommandTimeout bounds each setup and start command of a task.
const CommandTimeout = 5 * time.Minute

// Template is how a task becomes a pool template: its sandbox (image,
// files, environment, limits, and a GUI when the task has a browser
// section), its setup commands (run once, into the golden checkpoint) and
// its start commands (run in every replica), and its branch_start commands
// (run in every branch instead).
func Template(s *task.Spec) (*pool.Template, error) {
	gui, err := GUI(s.Browser)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for p, c := range s.Files {
		files[p] = []byte(c)
	}
	env := make([]string, 0, len(s.Env))
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return &pool.Template{
		Key: s.ID + "@" + s.Hash()[:12],
		Spec: providers.Spec{
			Image:     s.Image,
			Files:     files,
			Env:       env,
			OutputCap: s.Limits.OutputCap,
			Resources: providers.Resources{CPUs: s.Limits.CPUs, MemoryMB: s.Limits.MemoryMB, Pids: s.Limits.Pids, Capabilities: s.Limits.Capabilities},
			Labels:    map[string]string{TaskLabel: s.ID},
			GUI:       gui,
		},
		Setup:          s.Setup,
		Start:          s.Start,
		BranchStart:    s.BranchStart,
		CommandTimeout: CommandTimeout,
	}, nil
}
