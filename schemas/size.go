package schemas

// The one row-size estimate. The shard writer rolls row groups and
// generations by it, and the collector's summary reports bytes per step by
// it, so what a run says it kept per step is what decided its shards.
//
// A size is uncompressed: the variable-length payloads plus a fixed
// allowance for the fixed-width columns and the Parquet levels. It is an
// estimate for flush decisions and reports, not a promise about the bytes on
// disk (zstd usually does much better).
const (
	stepFixed    = 160
	episodeFixed = 128
	rewardFixed  = 48
	blobFixed    = 16
	tokenBytes   = 4 // an int32 id or mask entry, a float32 logprob
)

func optLen(s *string) int {
	if s == nil {
		return 0
	}
	return len(*s)
}

// Size estimates the row's uncompressed bytes.
func (r *StepRow) Size() int64 {
	n := stepFixed + len(r.EpisodeID) + len(r.TaskID) + len(r.ActionKind) + len(r.ActionJSON) +
		len(r.Output) + len(r.OutputRaw) + len(r.ErrorKind) + len(r.Screenshot) + len(r.ScreenHash) +
		len(r.AXTree) + optLen(r.Model) + optLen(r.ModelText) + optLen(r.Reasoning) + optLen(r.ToolCalls) + optLen(r.FinishReason) +
		optLen(r.TokenPath) + optLen(r.TokenEndpoints) + optLen(r.ChatTemplateSHA256) + 64*len(r.PromptImages) +
		optLen(r.HarnessInput) + optLen(r.HistoryCut) + optLen(r.ToolsSHA256) +
		tokenBytes*(len(r.PromptIDs)+len(r.ResponseIDs)+len(r.ResponseMask)+len(r.ResponseLogprobs))
	return int64(n)
}

// Size estimates the row's uncompressed bytes.
func (r *EpisodeRow) Size() int64 {
	n := episodeFixed + len(r.EpisodeID) + len(r.RunID) + len(r.TaskID) + len(r.TaskHash) +
		len(r.Provider) + len(r.GoldenID) + len(r.ResetStrategy) + len(r.ResetOrigin) +
		len(r.ExitReason) + len(r.Detail) + len(r.Answer) + optLen(r.ParentEpisodeID) + optLen(r.GroupID) + optLen(r.TokenCut) + optLen(r.Metadata) +
		optLen(r.StartOutput) + len(r.StartScreenshot) + optLen(r.StartScreenHash) + optLen(r.StartAXTree) + optLen(r.Agent) +
		tokenBytes*(len(r.PromptIDs)+len(r.ResponseIDs)+len(r.ResponseMask)+len(r.ResponseLogprobs))
	return int64(n)
}

// Size estimates the row's uncompressed bytes.
func (r *RewardRow) Size() int64 {
	return int64(rewardFixed + len(r.EpisodeID) + len(r.Name) + len(r.Source) + len(r.Detail))
}

// Size estimates the row's uncompressed bytes.
func (r *BlobRow) Size() int64 {
	return int64(blobFixed + len(r.SHA256) + len(r.Media) + len(r.Data))
}
