// Package serve is forkline's environment server: it serves the episodes of
// task specs to a trainer that drives them online, over the OpenEnv wire
// protocol (/ws sessions with reset, step, state and close; /health,
// /metadata, /schema, /state, /openapi.json and the one-shot HTTP /reset and
// /step; MCP at POST /mcp, the task's actions as tools), where
// every reset hands the session a fork of the task's golden checkpoint —
// from the pool's warm standby when one is ready, so a reset is a hand-off
// — and every step is one canonical action. The client is the episode's
// policy: each session runs its episode through episode.Driver, so limits,
// capture, verification, exit reasons and rows are exactly collect's, and
// every served episode can be recorded into a forkline dataset (the same
// shards and manifest; the policy entry says an external client acted).
//
// It owns sessions (capacity, idle reaping, what a closed or dropped
// connection does), the mapping of OpenEnv's messages, its stateless HTTP
// forms and its MCP methods onto forks, the JSON Schemas and the OpenAPI
// document it publishes (one route table), the request envelope (extra
// keys dropped and logged, as OpenEnv drops them), and the graceful drain. It does not know how a sandbox is made (pool, providers), how a
// step is captured or verified (episode, capture, task), or how rows are
// written (formats/shard): it calls them. Branching over the wire is an
// extension of the session protocol: a session checkpoints its episode (the
// episode goes on) and resets from a checkpoint start branches of it, with
// collect's lineage; a branch is committed only after its parent.
package serve
