// Package manifest owns the entries of a dataset's manifest.json that the
// commands write and read: the provider record (Provider), the policy record
// with the conversation the policy had (Policy), the plan (Plan) and the
// run summary (Summary: collect's, serve's, replay's or merge's report,
// with the one latency distribution every command reports, Latency, and
// the one quantile rule, Sample), and the one rule for what a resume
// accepts (ResumeMismatches: the tasks, the capture policy, the provider
// settings and policy options that shape episodes, by ProviderSettingShapes
// and PolicyOptionShapes; collect's and serve's -resume), whose refusals
// are typed (ErrResumeMismatch: each field, the stored value and the given
// one, for the command to name by its flags). Every writer builds these types and
// every reader decodes them (Read, and the Decode functions), so no command
// writes a map literal or reads with a private copy of a struct: a field
// renamed on one side is a compile error, not an empty inspect.
//
// Where it sits, and why: formats/shard stores these entries as opaque
// JSON (it knows nothing of providers or policies, and its readers must
// stay cheap), and the capture policy (capture) and the task records (task)
// keep their own typed forms. This package is above formats/shard and
// below every command package — collect, replay and serve write through
// it, inspect, export and verify read through it — and it imports only
// formats/shard, policy, providers, capture and task, none of which imports a
// command package, so each of them can import it without a cycle. A run
// setup shared by collect, replay and serve builds on it.
//
// It must not know how a run is carried out (pools, episodes, servers) or
// any trainer format, nor how its entries read to a person: the summaries
// are data, and internal/ui writes the text collect and serve print.
package manifest
