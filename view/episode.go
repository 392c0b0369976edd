package view

import (
	"context"
	"errors"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/schemas"
)

// Episode is one episode as the episode page shows it: inspect's
// transcript (the instruction, each step as the model saw it, rewards with
// their verifier output, timings, the branching tree), the accessibility
// trees the steps captured, and the token record.
type Episode struct {
	*inspect.Transcript
	// StartA11y and StepA11y are the compact JSON accessibility trees of
	// the start page and of each step (by step index), "" when none.
	StartA11y string            `json:"start_a11y_tree,omitempty"`
	StepA11y  map[int32]string  `json:"step_a11y_trees,omitempty"`
	Tokens    *TokenRecord      `json:"tokens,omitempty"`
	Reports   []EpisodeInReport `json:"replay_reports,omitempty"`
}

// TokenRecord is an episode's token record as the trainer gets it: the
// first prompt's ids, then every response and observation token with its
// loss mask (1: the model's own tokens, trained on) and logprob. Cut says
// why a drifted record stops early (Turns model turns of ModelTurns are
// in it): the drift cut point the page marks.
type TokenRecord struct {
	PromptIDs   []int32   `json:"prompt_ids"`
	ResponseIDs []int32   `json:"response_ids"`
	Mask        []int32   `json:"response_mask"`
	Logprobs    []float32 `json:"response_logprobs"`
	Drift       bool      `json:"token_drift"`
	Cut         string    `json:"token_cut,omitempty"`
	Turns       int32     `json:"token_turns"`
	ModelTurns  int       `json:"model_turns"`
	// TurnEnds are the offsets in ResponseIDs where each recorded model
	// turn's response ends (the mask turning from 1 to 0), for the page's
	// turn markers.
	TurnEnds []int `json:"turn_ends"`
}

type tokenCols struct {
	EpisodeID   string    `parquet:"episode_id"`
	PromptIDs   []int32   `parquet:"prompt_ids,list"`
	ResponseIDs []int32   `parquet:"response_ids,list"`
	Mask        []int32   `parquet:"response_mask,list"`
	Logprobs    []float32 `parquet:"response_logprobs,list"`
	TokenDrift  bool      `parquet:"token_drift"`
	TokenCut    *string   `parquet:"token_cut,optional"`
	TokenTurns  int32     `parquet:"token_turns"`
	StartAXTree *string   `parquet:"start_a11y_tree,optional"`
}

type a11yCols struct {
	EpisodeID string  `parquet:"episode_id"`
	StepIndex int32   `parquet:"step_index"`
	AXTree    string  `parquet:"a11y_tree,optional"`
	Model     *string `parquet:"model,optional"`
}

// shardOf is the table's shard of generation gen, if it has one.
func shardOf(ds *shard.Dataset, table string, gen int) (shard.ShardInfo, bool) {
	for _, s := range ds.Shards(table) {
		if s.Generation == gen {
			return s, true
		}
	}
	return shard.ShardInfo{}, false
}

// readEpisode builds the episode page's data for the episode id (exactly)
// of generation gen of the run: it reads that generation's shards (and the
// episodes and rewards tables for a branching tree), not the whole run.
func readEpisode(ctx context.Context, ds *shard.Dataset, id string, gen int) (*Episode, error) {
	t, err := inspect.TranscriptIn(ctx, ds, id, gen, inspect.TranscriptOptions{})
	if err != nil {
		return nil, err
	}
	ep := &Episode{Transcript: t}
	eps, _ := shardOf(ds, schemas.TableEpisodes, gen)
	for c, err := range shard.ProjectShard[tokenCols](ds, eps) {
		if err != nil {
			return nil, err
		}
		if c.EpisodeID != id {
			continue
		}
		if c.StartAXTree != nil {
			ep.StartA11y = *c.StartAXTree
		}
		if len(c.PromptIDs) > 0 || len(c.ResponseIDs) > 0 {
			ep.Tokens = &TokenRecord{PromptIDs: c.PromptIDs, ResponseIDs: c.ResponseIDs, Mask: c.Mask, Logprobs: c.Logprobs,
				Drift: c.TokenDrift, Turns: c.TokenTurns, TurnEnds: []int{}}
			if c.TokenCut != nil {
				ep.Tokens.Cut = *c.TokenCut
			}
			for i := range c.Mask {
				if c.Mask[i] == 1 && (i+1 == len(c.Mask) || c.Mask[i+1] == 0) {
					ep.Tokens.TurnEnds = append(ep.Tokens.TurnEnds, i+1)
				}
			}
		} else if c.TokenDrift {
			cut := ""
			if c.TokenCut != nil {
				cut = *c.TokenCut
			}
			ep.Tokens = &TokenRecord{Drift: true, Cut: cut, PromptIDs: []int32{}, ResponseIDs: []int32{}, Mask: []int32{}, Logprobs: []float32{}, TurnEnds: []int{}}
		}
		break
	}
	steps, ok := shardOf(ds, schemas.TableSteps, gen)
	if !ok {
		return ep, nil
	}
	seen := false
	for s, err := range shard.ProjectShard[a11yCols](ds, steps) {
		if err != nil {
			return nil, err
		}
		if s.EpisodeID != id {
			if seen {
				break // an episode's steps are together
			}
			continue
		}
		seen = true
		if s.Model != nil && ep.Tokens != nil {
			ep.Tokens.ModelTurns++
		}
		if s.AXTree != "" {
			if ep.StepA11y == nil {
				ep.StepA11y = map[int32]string{}
			}
			ep.StepA11y[s.StepIndex] = s.AXTree
		}
	}
	return ep, nil
}

type shotCols struct {
	EpisodeID  string `parquet:"episode_id"`
	StepIndex  int32  `parquet:"step_index"`
	Screenshot []byte `parquet:"screenshot,optional"`
	ScreenHash string `parquet:"screenshot_sha256,optional"`
}

type startShotCols struct {
	EpisodeID       string  `parquet:"episode_id"`
	StartScreenshot []byte  `parquet:"start_screenshot,optional"`
	StartScreenHash *string `parquet:"start_screenshot_sha256,optional"`
}

// errNoScreenshot: the step took no screenshot, or the run kept only its
// hash (pixels=none).
var errNoScreenshot = errors.New("view: no screenshot")

// screenshotPNG returns the PNG of an episode's step (step < 0: its start
// page): the bytes in the row (pixels=full) or the blob its hash names
// (pixels=hash), reading generation gen's shard only.
func screenshotPNG(ds *shard.Dataset, id string, step, gen int) ([]byte, error) {
	var png []byte
	var hash string
	if step < 0 {
		eps, _ := shardOf(ds, schemas.TableEpisodes, gen)
		for c, err := range shard.ProjectShard[startShotCols](ds, eps) {
			if err != nil {
				return nil, err
			}
			if c.EpisodeID == id {
				png = c.StartScreenshot
				if c.StartScreenHash != nil {
					hash = *c.StartScreenHash
				}
				break
			}
		}
	} else {
		steps, ok := shardOf(ds, schemas.TableSteps, gen)
		if !ok {
			return nil, errNoScreenshot
		}
		for c, err := range shard.ProjectShard[shotCols](ds, steps) {
			if err != nil {
				return nil, err
			}
			if c.EpisodeID == id && int(c.StepIndex) == step {
				png, hash = c.Screenshot, c.ScreenHash
				break
			}
		}
	}
	if len(png) > 0 {
		return png, nil
	}
	if hash == "" {
		return nil, errNoScreenshot
	}
	b, err := ds.Blob(hash)
	if errors.Is(err, shard.ErrBlobNotFound) {
		return nil, errNoScreenshot
	}
	return b, err
}
