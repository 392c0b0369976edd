package task

import "time"

// Bounds of the values a task file may give. Parse refuses anything outside
// them, naming the file, line and field, because each value outside them
// would otherwise break, or be silently ignored, far from the file: in a
// replica at run time, in a sandbox's resource settings, or in the dataset.
// docs/TASKS.md lists them for users.
const (
	// MinTimeout and MaxTimeout bound every duration of a task
	// (limits.action_timeout, limits.episode_timeout, verify.timeout,
	// browser.load_timeout) and a scripted action's timeout_ms and wait ms.
	// Timeouts travel as whole milliseconds, so a shorter one would round
	// to 0, which means "the default"; a week is beyond any episode, and
	// keeps deadlines that add a grace period far from int64 overflow.
	MinTimeout = time.Millisecond
	MaxTimeout = 7 * 24 * time.Hour

	// MaxStepsLimit bounds limits.max_steps: step indexes are int32 in the
	// dataset, and a million steps is beyond any agent episode.
	MaxStepsLimit = 1_000_000

	// MaxOutputCap bounds limits.output_cap (bytes kept per action
	// output): an output is held in memory and stored as one Parquet value.
	MaxOutputCap = 1 << 30

	// MinCPUs and MaxCPUs bound limits.cpus. Docker refuses less than a
	// hundredth of a core, and a value converted to nano-CPUs must fit in
	// an int64.
	MinCPUs = 0.01
	MaxCPUs = 1024

	// MinMemoryMB and MaxMemoryMB bound limits.memory_mb: Docker refuses
	// less than 6 MiB, and the limit in bytes must fit in an int64 with
	// room to spare (16 TiB).
	MinMemoryMB = 6
	MaxMemoryMB = 16 << 20

	// MaxPids bounds limits.pids: Linux's own ceiling on process ids.
	MaxPids = 1 << 22

	// MaxArgBytes bounds one command (setup, start, verify, a scripted
	// exec) and one environment entry (NAME=value): both reach the
	// sandbox's shell as one execve string, which Linux caps at 128 KiB
	// including its terminating NUL (MAX_ARG_STRLEN); a longer one fails
	// with "argument list too long" in every replica.
	MaxArgBytes = 128<<10 - 1

	// MaxEnvBytes bounds the whole environment of a task (every
	// NAME=value): with one command it must fit execve's total of 2 MiB.
	MaxEnvBytes = 1 << 20

	// MaxNameBytes bounds one segment of a file name (Linux NAME_MAX).
	MaxNameBytes = 255
)

// Bounds of the files a task reads from paths (files: {path: ...},
// verify.files, a Harbor task's tests/ and solution/): a dataset records
// its tasks, contents included, so that it can be replayed and exported
// without the task files. Large data belongs in the image (build:).
const (
	// MaxFileBytes bounds one such file.
	MaxFileBytes = 64 << 20
	// MaxFilesBytes bounds all the files of one section together.
	MaxFilesBytes = 256 << 20
)
