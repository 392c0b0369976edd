// Package jsonl writes a native dataset as JSON Lines, one episode per line
// with its steps and rewards nested in step order: the quickest way to read a
// run with jq, grep or a notebook, and a lossless view of every column
// (binary columns are base64, as encoding/json writes []byte).
//
// It knows the native row types and the shard reader. Trainer formats
// (verl, Hugging Face, TRL/OpenAI) live in their own packages.
package jsonl

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/schemas"
)

// Episode is one output line.
type Episode struct {
	schemas.EpisodeRow
	Steps   []schemas.StepRow   `json:"step_rows"` // "steps" is the episode row's step count
	Rewards []schemas.RewardRow `json:"rewards"`
}

// Write streams every episode of ds to w, one JSON object per line, holding
// one episode in memory at a time. It returns the number of episodes written.
func Write(ds *shard.Dataset, w io.Writer) (int, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	err := ds.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
		if steps == nil {
			steps = []schemas.StepRow{}
		}
		if rewards == nil {
			rewards = []schemas.RewardRow{}
		}
		if err := enc.Encode(Episode{EpisodeRow: ep, Steps: steps, Rewards: rewards}); err != nil {
			return fmt.Errorf("jsonl: episode %s: %w", ep.EpisodeID, err)
		}
		n++
		return nil
	})
	if err != nil {
		return n, err
	}
	return n, bw.Flush()
}
