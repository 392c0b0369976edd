package manifest

// Serve is what forkline serve served, for the operator and the manifest.
type Serve struct {
	Addr     string  `json:"addr"`
	Dataset  string  `json:"dataset,omitempty"`
	Seconds  float64 `json:"seconds"`
	Sessions int     `json:"sessions"`
	Reaped   int     `json:"sessions_reaped"`
	Dropped  int     `json:"connections_dropped"`
	Resets   int     `json:"resets"`
	// ResetFailures are resets the pool could not serve after its retries.
	ResetFailures int `json:"reset_failures"`
	Steps         int `json:"steps"`
	// Checkpoints are the checkpoints sessions made (branching over the
	// wire); BranchResets (in Resets too) the resets from one.
	Checkpoints  int `json:"checkpoints"`
	BranchResets int `json:"branch_resets"`
	// Episodes counts the episodes that ended, by exit reason; Kept those
	// recorded (an episode cancelled before its first step is not).
	Episodes      map[string]int `json:"episodes"`
	Kept          int            `json:"episodes_recorded"`
	RecordErrors  int            `json:"record_errors"`
	RewardMean    *float64       `json:"reward_mean,omitempty"`
	Rewarded      int            `json:"rewarded"`
	ResetLatency  []ResetLatency `json:"reset_latency_ms"`
	GoldenBuilds  int            `json:"golden_builds"`
	Replacements  int            `json:"replacements"`
	ResetsByFresh int            `json:"pool_resets"`
}

// ResetLatency is the server-side reset latency of one reset kind
// (strategy, "+standby" for a hand-off, and the provider's origin).
type ResetLatency struct {
	Kind string `json:"kind"`
	Latency
}
