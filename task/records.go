package task

import (
	"encoding/json"
	"fmt"
)

// Record is how a task is recorded in a dataset's manifest: its id, its hash
// when the run started, and the whole spec, so a dataset can be replayed or
// exported without the original task files.
type Record struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
	Spec Spec   `json:"spec"`
}

// EncodeRecords returns the manifest form of specs (defaults applied).
func EncodeRecords(specs []Spec) (json.RawMessage, error) {
	recs := make([]Record, len(specs))
	for i, s := range specs {
		s = s.WithDefaults()
		recs[i] = Record{ID: s.ID, Hash: s.Hash(), Spec: s}
	}
	b, err := json.Marshal(recs)
	if err != nil {
		return nil, fmt.Errorf("task: encoding records: %w", err)
	}
	return b, nil
}

// DecodeRecords reads the records of a manifest and returns the specs by id.
// A spec that no longer hashes to its recorded hash (written by a different
// version, or edited by hand) is refused: its episode ids would not match.
func DecodeRecords(raw json.RawMessage) (map[string]Spec, error) {
	recs, err := decodeRecords(raw)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Spec, len(recs))
	for _, r := range recs {
		s := r.Spec.WithDefaults()
		if h := s.Hash(); h != r.Hash {
			return nil, fmt.Errorf("task: recorded task %s hashes to %.12s, recorded %.12s (written by another version, or edited?)", r.ID, h, r.Hash)
		}
		out[r.ID] = s
	}
	return out, nil
}

// RecordHashes returns the recorded hash of every task by id, without
// checking the specs.
func RecordHashes(raw json.RawMessage) (map[string]string, error) {
	recs, err := decodeRecords(raw)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(recs))
	for _, r := range recs {
		out[r.ID] = r.Hash
	}
	return out, nil
}

func decodeRecords(raw json.RawMessage) ([]Record, error) {
	var recs []Record
	if err := json.Unmarshal(raw, &recs); err != nil {
		return nil, fmt.Errorf("task: recorded tasks unreadable: %w", err)
	}
	return recs, nil
}
