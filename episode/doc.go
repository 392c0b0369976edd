// Package episode is what one episode of a task is, whoever runs it: the
// task's pool template, the environment its sandboxes run in — opened once
// per run for the collector, the replayer and the server alike (OpenEnv:
// the provider swept, a browser beside the sandbox for a task with a
// browser section, the policy's shaping, the pool, the manifest's provider
// entry) — and the episode
// runner in named pieces — begin an episode on the replica the pool handed
// over, run a rollout into its capture sink, verify it, build its rows. The
// collector, the replayer and the environment server run episodes through
// these pieces; the server, which steps a sandbox on a trainer's command,
// drives the same Rollout through Driver, with the client as its policy; a
// branch that continues a parent's history calls them in its own order.
//
// It knows tasks, the pool, providers (and the GUI host the program
// registers, providers/browser's, never the browser itself), capture, and
// the dataset's row types and the manifest's provider entry. It does not
// know plans, resumes, comparisons, reports, or where rows are written: the
// caller decides what an episode's failure means for its run, and commits
// the rows.
package episode
