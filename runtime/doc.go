// Package runtime is forkline's narrow waist: the canonical Action and
// Observation, the ModelEvent a policy reports, the Step that joins them, the
// ExitReason taxonomy, the Session, Policy and StepSink interfaces, and
// Rollout, the loop that drives a Session with a Policy and streams every step
// to a sink as it happens.
//
// It imports only the standard library and knows nothing of tasks, rewards,
// scores, datasets or file formats: those are attached by consumers
// (pool, capture, formats) keyed by episode and step. A new consumer — an eval
// harness, a gym server, a training loop — is built on this package without
// editing it.
package runtime
