package manifest

import (
	"encoding/json"
	"fmt"
)

// Plan is the manifest's "plan" entry: what collect was asked to run.
// Datasets written by serve have none; replay -record copies its source's.
type Plan struct {
	Repeats  int    `json:"repeats"`
	Seed     int64  `json:"seed"`
	Replicas int    `json:"replicas"`
	Reset    string `json:"reset"`
	// Episodes are the roots planned in this part; Total those of every
	// part.
	Episodes int  `json:"episodes"`
	Part     Part `json:"part"`
	Total    int  `json:"episodes_all_parts"`
	// Branch is the branching plan (-branch at=K,width=N), "" for none.
	Branch string `json:"branch,omitempty"`
	// From is the stored dataset a -from run branched from, nil for none.
	From *From `json:"from,omitempty"`
	// Config is the run's configuration as the command that started (or
	// last resumed) it resolved it: each setting by its flag name, with
	// its values as the flag takes them, paths absolute. forkline collect
	// -resume -out DIR reads the rest of its flags from it. Absent in
	// runs written before it was recorded, or by a program that records
	// none.
	Config map[string][]string `json:"config,omitempty"`
}

// Part is the share of a run one machine collected (collect -shard i/n):
// the episodes whose id hashes to Index modulo Count.
type Part struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

// String is "i/n".
func (p Part) String() string { return fmt.Sprintf("%d/%d", p.Index, p.Count) }

// From is the source of a -from run.
type From struct {
	Dataset string `json:"dataset"` // as given, made absolute
	RunID   string `json:"run_id"`
	// Roots maps each planned root of the run to its source episode id;
	// a root whose prefix did not reproduce is planned, skipped, and not
	// in the dataset.
	Roots map[string]string `json:"roots"`
}

// Encode is the entry's JSON.
func (p Plan) Encode() json.RawMessage { return mustEncode(p) }

// DecodePlan reads a manifest's plan entry. A plan written before parts
// were recorded reads as the whole run (part 0/1).
func DecodePlan(raw json.RawMessage) (Plan, error) {
	var p Plan
	if err := json.Unmarshal(raw, &p); err != nil {
		return Plan{}, fmt.Errorf("manifest: plan: %w", err)
	}
	if p.Part.Count == 0 {
		p.Part.Count = 1
	}
	return p, nil
}
