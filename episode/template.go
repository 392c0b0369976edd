package episode

import (
	"fmt"
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

// Template is how a task becomes a pool template: its sandbox (image or
// the build that makes it, files, environment, network, limits, and a GUI
// when the task has a browser section), its setup commands (run once, into
// the golden checkpoint), its start commands (run in every replica) and its
// branch_start commands (run in every branch instead). Environment values
// that reference forkline's environment (${NAME}) are resolved here, into
// the template only: the task keeps the reference.
func Template(s *task.Spec) (*pool.Template, error) {
	gui, err := GUI(s.Browser)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for p, c := range s.Files {
		files[p] = []byte(c)
	}
	for p, c := range s.BinaryFiles {
		files[p] = c
	}
	vars, err := task.ExpandEnv(s.Env)
	if err != nil {
		return nil, fmt.Errorf("env: %w", err)
	}
	if s.Verify != nil {
		if _, err := task.ExpandEnv(s.Verify.Env); err != nil {
			return nil, fmt.Errorf("the verifier's env: %w", err)
		}
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	res := providers.Resources{CPUs: s.Limits.CPUs, MemoryMB: s.Limits.MemoryMB, Pids: s.Limits.Pids, Capabilities: s.Limits.Capabilities}
	setupNetwork := ""
	if s.Network != nil {
		res.Network, setupNetwork = s.Network.Episode, s.Network.Setup
	}
	var build *providers.Build
	if b := s.Build; b != nil {
		build = &providers.Build{Context: b.Context, Dockerfile: b.Dockerfile, Args: b.Args, Target: b.Target, Timeout: time.Duration(b.Timeout)}
	}
	services, err := Services(s.Compose)
	if err != nil {
		return nil, err
	}
	return &pool.Template{
		Key: s.ID + "@" + s.Hash()[:12],
		Spec: providers.Spec{
			Image:        s.Image,
			Build:        build,
			Files:        files,
			Env:          env,
			OutputCap:    s.Limits.OutputCap,
			Resources:    res,
			SetupNetwork: setupNetwork,
			Labels:       map[string]string{TaskLabel: s.ID},
			GUI:          gui,
			Services:     services,
			Shell:        providers.ShellMode(s.Shell),
		},
		Setup:          s.Setup,
		Start:          s.Start,
		BranchStart:    s.BranchStart,
		CommandTimeout: CommandTimeout,
	}, nil
}
