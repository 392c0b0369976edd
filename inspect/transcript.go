package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/schemas"
	"github.com/forkline/forkline/task"
)

// Transcript is one episode as a reader follows it: what the model was
// told, then each step's action and its observation as the model saw it.
// Its JSON form is what inspect -episode -json prints.
type Transcript struct {
	EpisodeID   string  `json:"episode_id"`
	RunID       string  `json:"run_id"`
	TaskID      string  `json:"task_id"`
	Repeat      int32   `json:"repeat"`
	Replica     int32   `json:"replica"`
	Provider    string  `json:"provider"`
	Reset       string  `json:"reset"` // "fork/overlay"
	ResetMS     float64 `json:"reset_ms"`
	DurationMS  float64 `json:"duration_ms"`
	ExitReason  string  `json:"exit_reason"`
	Detail      string  `json:"detail,omitempty"`
	Answer      string  `json:"answer,omitempty"`
	TokenRecord bool    `json:"token_record"`
	TokenDrift  bool    `json:"token_drift"`

	// System is the system prompt the policy recorded ("" when none), and
	// Instruction the task's instruction: the user message.
	System      string `json:"system,omitempty"`
	Instruction string `json:"instruction"`
	// Start is what a GUI episode's start page showed before the first
	// action (its url and title), "" for an episode without one; its
	// screenshot's hash is StartScreenshot.
	Start           string `json:"start,omitempty"`
	StartScreenshot string `json:"start_screenshot_sha256,omitempty"`
	// StartA11yTree is the start page's accessibility tree as text, when
	// TranscriptOptions.A11y asks for it.
	StartA11yTree string `json:"start_a11y_tree,omitempty"`
	// ObservationCap is the most bytes of an observation the policy showed
	// the model (0: all); Observation texts are cut the same way.
	ObservationCap int `json:"observation_cap"`

	Steps   []Step   `json:"steps"`
	Rewards []Reward `json:"rewards"`

	// Lineage, for a branch episode: its parent and the step it starts
	// at (Steps are its own, numbered from there; the prefix is the
	// parent's). Tree is the branching tree the episode belongs to, from
	// its root, with rewards per branch; nil outside a tree.
	Parent     string    `json:"parent_episode_id,omitempty"`
	BranchStep int       `json:"branch_step,omitempty"`
	Tree       *TreeNode `json:"tree,omitempty"`

	// Agent is how an agent harness ran the episode (its agent column),
	// nil for other policies'; its steps are the harness's model calls.
	Agent *schemas.AgentRecord `json:"agent,omitempty"`
}

// Step is one step of a transcript.
type Step struct {
	Index        int    `json:"index"`
	ModelText    string `json:"model_text,omitempty"`
	Reasoning    string `json:"reasoning,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
	// Model, TokenPath, TokenEndpoints: the server's model name and how
	// the turn's token ids were made (its provenance); "" when not recorded.
	Model          string `json:"model,omitempty"`
	TokenPath      string `json:"token_path,omitempty"`
	TokenEndpoints string `json:"token_endpoints,omitempty"`
	ActionKind     string `json:"action_kind"` // "" when the turn produced no action
	Action         string `json:"action"`      // canonical action JSON
	// Arguments are the action's fields as the model wrote them (the
	// canonical JSON without "kind", HTML characters unescaped).
	Arguments   json.RawMessage `json:"arguments,omitempty"`
	Observation string          `json:"observation"` // the step's result as the model saw it (aci.ObservationShown's text)
	ExitCode    int32           `json:"exit_code"`
	IsError     bool            `json:"is_error"`
	TimedOut    bool            `json:"timed_out"`
	Truncated   bool            `json:"truncated"`
	OutputBytes int64           `json:"output_bytes"`
	PolicyMS    float64         `json:"policy_ms"`
	EnvMS       float64         `json:"env_ms"`
	A11yBytes   int             `json:"a11y_bytes,omitempty"`
	// A11yTree is the step's accessibility tree as text (aci.TreeText: one
	// node a line, with its box in the screenshot's pixels), when
	// TranscriptOptions.A11y asks for this step's; "" otherwise.
	A11yTree string `json:"a11y_tree,omitempty"`
	// Screenshot is the step's screenshot, when one was taken.
	Screenshot *Screenshot `json:"screenshot,omitempty"`
	// PromptImages are the hashes of the screenshots the turn's prompt
	// carried as images, in order (none for a text-only prompt).
	PromptImages []string `json:"prompt_images,omitempty"`
	Rewards      []Reward `json:"rewards,omitempty"` // step-level rewards

	// An agent harness's model call: its tool calls as the harness got
	// them (the observation is their results, as the harness sent them
	// back), what the harness added before the call (chat messages), and
	// why the call did not continue the previous one.
	ToolCalls    json.RawMessage `json:"tool_calls,omitempty"`
	HarnessInput json.RawMessage `json:"harness_input,omitempty"`
	HistoryCut   string          `json:"history_cut,omitempty"`
}

// Screenshot is a step's screenshot and where its pixels are.
type Screenshot struct {
	SHA256 string `json:"sha256"`
	Width  int32  `json:"width"`
	Height int32  `json:"height"`
	// Stored is "row" (pixels=full), "blob" (pixels=hash) or "none"
	// (pixels=none: only the hash and size were kept).
	Stored string `json:"stored"`
	// File is where TranscriptOptions.Screenshots wrote it.
	File string `json:"file,omitempty"`
}

// Reward is one reward row.
type Reward struct {
	Name     string   `json:"name"`
	Step     *int32   `json:"step,omitempty"`
	Value    *float64 `json:"value"`
	Source   string   `json:"source,omitempty"`
	Detail   string   `json:"detail,omitempty"`
	ExitCode int32    `json:"exit_code"`
}

// TranscriptOptions configure Transcripts.
type TranscriptOptions struct {
	// Screenshots, when set, is a directory (created if missing) where the
	// episodes' screenshots are written as EPISODE-step-NNN.png.
	Screenshots string
	// A11y says whose stored accessibility trees (web tasks captured with
	// a11y=full) the transcript carries as text; none when zero.
	A11y A11ySteps
}

// A11ySteps names the accessibility trees a transcript shows: the start
// page's, every step's, or the steps whose index is listed.
type A11ySteps struct {
	Start bool
	All   bool
	Steps []int
}

// has reports whether the tree of step i is asked for.
func (a A11ySteps) has(i int) bool { return a.All || slices.Contains(a.Steps, i) }

// ParseA11ySteps reads "all", "start" and step indexes, comma-separated
// ("start,3,4").
func ParseA11ySteps(s string) (A11ySteps, error) {
	var a A11ySteps
	for _, f := range strings.Split(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case "all":
			a.All, a.Start = true, true
		case "start":
			a.Start = true
		default:
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				return A11ySteps{}, fmt.Errorf("inspect: accessibility tree %q: want all, start or a step index (0, 1, ...)", f)
			}
			a.Steps = append(a.Steps, n)
		}
	}
	return a, nil
}

// maxCandidates bounds the episode ids an ambiguous prefix lists.
const maxCandidates = 5

// Transcripts returns the transcript of the episode each prefix names, in
// the order of the prefixes. A prefix must match exactly one episode id:
// none or several fail with ErrNoMatch (listing some of the candidates).
// It fails with ErrNotDataset or ErrDamaged as Summarize does, and reads
// the dataset as a stream, holding only the episodes asked for.
func Transcripts(ctx context.Context, dir string, prefixes []string, o TranscriptOptions) ([]*Transcript, error) {
	if len(prefixes) == 0 {
		return nil, fmt.Errorf("%w: no episode id prefix given", ErrNoMatch)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = fmt.Errorf("%s is not a directory", dir)
		}
		return nil, fmt.Errorf("%w: %v", ErrNotDataset, err)
	}
	ds, err := shard.Open(dir)
	if err != nil {
		return nil, classify(dir, err)
	}
	m := ds.Manifest()
	ids, err := matchPrefixes(ctx, ds, prefixes)
	if err != nil {
		return nil, err
	}
	conv, specs, err := readSetup(dir, m)
	if err != nil {
		return nil, err
	}
	if o.Screenshots != "" {
		if err := os.MkdirAll(o.Screenshots, 0o755); err != nil {
			return nil, fmt.Errorf("inspect: -screenshots: %w", err)
		}
	}

	byID := map[string]*Transcript{}
	for _, id := range ids {
		byID[id] = nil
	}
	found := 0
	errDone := errors.New("all found")
	err = ds.EachEpisode(func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if t, want := byID[ep.EpisodeID]; !want || t != nil {
			return nil
		}
		t, err := transcript(ds, ep, steps, rewards, specs, conv, o)
		if err != nil {
			return err
		}
		byID[ep.EpisodeID] = t
		if found++; found == len(byID) {
			return errDone
		}
		return nil
	})
	if err := readFailure(err, errDone); err != nil {
		return nil, err
	}
	out := make([]*Transcript, len(ids))
	for i, id := range ids {
		if out[i] = byID[id]; out[i] == nil {
			// Listed in the episodes table but not found with its steps:
			// EachEpisode would have failed on a dataset this broken.
			return nil, fmt.Errorf("%w: %s: episode %s has no rows", ErrDamaged, dir, id)
		}
	}
	tr, err := trees(ds, ids)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	for i, id := range ids {
		out[i].Tree = tr[id]
	}
	return out, nil
}

// readSetup reads what a transcript needs of the manifest: the
// conversation the policy recorded and the task specs.
func readSetup(dir string, m shard.Manifest) (conversation, map[string]task.Spec, error) {
	conv, err := readConversation(m)
	if err != nil {
		return conv, nil, fmt.Errorf("%w: %s/%s: %v", ErrDamaged, dir, shard.ManifestFile, err)
	}
	if len(m.Capture) > 0 {
		capt, err := capture.DecodeManifest(m.Capture)
		if err != nil {
			return conv, nil, fmt.Errorf("%w: %s/%s: capture: %v", ErrDamaged, dir, shard.ManifestFile, err)
		}
		conv.noPixels = capt.Pixels == capture.PixelsNone
	}
	var specs map[string]task.Spec
	if len(m.Tasks) > 0 {
		if specs, err = task.DecodeRecords(m.Tasks); err != nil {
			return conv, nil, fmt.Errorf("%w: %s/%s: %v", ErrDamaged, dir, shard.ManifestFile, err)
		}
	}
	return conv, specs, nil
}

// TranscriptIn is Transcripts for one episode whose id (exactly) and
// generation the caller knows: it reads that generation's shards only
// (and, for an episode of a branching tree, the episodes and rewards
// tables for the tree), not the whole run. An id not in the generation
// fails with ErrNoMatch.
func TranscriptIn(ctx context.Context, ds *shard.Dataset, id string, gen int, o TranscriptOptions) (*Transcript, error) {
	conv, specs, err := readSetup(ds.Dir(), ds.Manifest())
	if err != nil {
		return nil, err
	}
	var t *Transcript
	errDone := errors.New("found")
	err = ds.EachEpisodeIn(gen, func(ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if ep.EpisodeID != id {
			return nil
		}
		var err error
		if t, err = transcript(ds, ep, steps, rewards, specs, conv, o); err != nil {
			return err
		}
		return errDone
	})
	if err := readFailure(err, errDone); err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("%w: no episode %s in generation %d of %s", ErrNoMatch, id, gen, ds.Dir())
	}
	tr, err := trees(ds, []string{id})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	t.Tree = tr[id]
	return t, nil
}

// matchPrefixes finds the one episode id each prefix names, reading the
// episodes table once.
func matchPrefixes(ctx context.Context, ds *shard.Dataset, prefixes []string) ([]string, error) {
	matches := make([][]string, len(prefixes))
	counts := make([]int, len(prefixes))
	for ep, err := range ds.Episodes() {
		if err != nil {
			return nil, classify(ds.Dir(), err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for i, p := range prefixes {
			if strings.HasPrefix(ep.EpisodeID, p) {
				counts[i]++
				if len(matches[i]) < maxCandidates {
					matches[i] = append(matches[i], ep.EpisodeID)
				}
			}
		}
	}
	ids := make([]string, len(prefixes))
	for i, p := range prefixes {
		switch counts[i] {
		case 0:
			return nil, fmt.Errorf("%w: no episode id in %s starts with %q", ErrNoMatch, ds.Dir(), p)
		case 1:
			ids[i] = matches[i][0]
		default:
			more := ""
			if counts[i] > len(matches[i]) {
				more = fmt.Sprintf(", ... (%d in all)", counts[i])
			}
			return nil, fmt.Errorf("%w: %d episode ids in %s start with %q: %s%s; give more of the id",
				ErrNoMatch, counts[i], ds.Dir(), p, strings.Join(matches[i], ", "), more)
		}
	}
	return ids, nil
}

// conversation is what the policy recorded of the conversation it had.
type conversation struct {
	system   string
	obsCap   int
	noPixels bool // the capture policy kept no pixels (pixels=none)
	shown    policy.Conversation
}

// readConversation reads the system prompt and the observation cap from
// the run's recorded policy (manifest.Policy.Shown: the typed conversation,
// or for a run recorded before it was typed, its options), as export does.
func readConversation(m shard.Manifest) (conversation, error) {
	var c conversation
	if len(m.Policy) == 0 {
		return c, nil
	}
	rec, err := manifest.DecodePolicy(m.Policy)
	if err != nil {
		return c, fmt.Errorf("policy: %w", err)
	}
	shown, err := rec.Shown()
	if err != nil {
		return c, fmt.Errorf("policy: %w", err)
	}
	c.system, c.obsCap, c.shown = shown.SystemPrompt, shown.ObservationCap, shown
	return c, nil
}

// transcript builds one episode's transcript, writing its screenshots when
// asked.
func transcript(ds *shard.Dataset, ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow,
	specs map[string]task.Spec, conv conversation, o TranscriptOptions) (*Transcript, error) {
	t := &Transcript{EpisodeID: ep.EpisodeID, RunID: ep.RunID, TaskID: ep.TaskID, Repeat: ep.Repeat, Replica: ep.Replica,
		Provider: ep.Provider, ResetMS: ep.ResetMS, DurationMS: ep.DurationMS, ExitReason: ep.ExitReason,
		Detail: ep.Detail, Answer: ep.Answer, TokenRecord: len(ep.ResponseIDs) > 0 || len(ep.PromptIDs) > 0,
		TokenDrift: ep.TokenDrift, System: conv.system, ObservationCap: conv.obsCap, Steps: []Step{}, Rewards: []Reward{}}
	if ep.ParentEpisodeID != nil && ep.BranchStep != nil {
		t.Parent, t.BranchStep = *ep.ParentEpisodeID, int(*ep.BranchStep)
	}
	t.Reset = ep.ResetStrategy
	if ep.ResetOrigin != "" {
		t.Reset += "/" + ep.ResetOrigin
	}
	if sp, ok := specs[ep.TaskID]; ok {
		t.Instruction = sp.Instruction
	}
	if ep.Agent != nil {
		var rec schemas.AgentRecord
		if err := json.Unmarshal([]byte(*ep.Agent), &rec); err != nil {
			return nil, fmt.Errorf("%w: episode %s: agent: %v", shard.ErrCorrupt, ep.EpisodeID, err)
		}
		t.Agent = &rec
	}
	if ep.StartOutput != nil {
		t.Start = *ep.StartOutput
	}
	if ep.StartScreenHash != nil {
		t.StartScreenshot = *ep.StartScreenHash
	}
	if o.A11y.Start && ep.StartAXTree != nil && *ep.StartAXTree != "" {
		t.StartA11yTree = aci.TreeText(*ep.StartAXTree)
	}
	for i := range steps {
		s := &steps[i]
		st := Step{Index: int(s.StepIndex), ModelText: deref(s.ModelText), Reasoning: deref(s.Reasoning),
			FinishReason: deref(s.FinishReason), Model: deref(s.Model), TokenPath: deref(s.TokenPath), TokenEndpoints: deref(s.TokenEndpoints),
			ActionKind: s.ActionKind, Action: s.ActionJSON,
			ExitCode: s.ExitCode, IsError: s.IsError, TimedOut: s.TimedOut, Truncated: s.Truncated,
			OutputBytes: s.OutputBytes, PolicyMS: s.PolicyMS, EnvMS: s.EnvMS, A11yBytes: len(s.AXTree), PromptImages: s.PromptImages}
		if s.AXTree != "" && o.A11y.has(int(s.StepIndex)) {
			st.A11yTree = aci.TreeText(s.AXTree)
		}
		if s.HarnessInput != nil {
			if !json.Valid([]byte(*s.HarnessInput)) {
				return nil, fmt.Errorf("%w: episode %s step %d: harness_input is not JSON", shard.ErrCorrupt, ep.EpisodeID, s.StepIndex)
			}
			st.HarnessInput = json.RawMessage(*s.HarnessInput)
			st.HistoryCut = deref(s.HistoryCut)
			st.Observation = s.Output // the results, as the harness sent them back
		}
		if s.ToolCalls != nil {
			if !json.Valid([]byte(*s.ToolCalls)) {
				return nil, fmt.Errorf("%w: episode %s step %d: tool_calls is not JSON", shard.ErrCorrupt, ep.EpisodeID, s.StepIndex)
			}
			st.ToolCalls = json.RawMessage(*s.ToolCalls)
		}
		if s.ActionKind != "" {
			args, err := model.Arguments(s.ActionJSON)
			if err != nil {
				return nil, fmt.Errorf("%w: episode %s step %d: %v", shard.ErrCorrupt, ep.EpisodeID, s.StepIndex, err)
			}
			st.Arguments = args
			// As the policy showed it: the tree too under observe=a11y or
			// both (the image is the step's screenshot, listed below).
			obs, err := model.ShownResult(s, conv.shown)
			if err != nil {
				return nil, fmt.Errorf("%w: episode %s step %d: %v", shard.ErrCorrupt, ep.EpisodeID, s.StepIndex, err)
			}
			st.Observation = obs.Text
		}
		if s.ScreenHash != "" || len(s.Screenshot) > 0 {
			shot, err := screenshot(ds, ep.EpisodeID, s, o.Screenshots, conv.noPixels)
			if err != nil {
				return nil, err
			}
			st.Screenshot = shot
		}
		t.Steps = append(t.Steps, st)
	}
	for _, r := range rewards {
		rw := Reward{Name: r.Name, Step: r.StepIndex, Value: r.Value, Source: r.Source, Detail: r.Detail, ExitCode: r.ExitCode}
		if r.StepIndex != nil && int(*r.StepIndex) < len(t.Steps) && *r.StepIndex >= 0 {
			t.Steps[*r.StepIndex].Rewards = append(t.Steps[*r.StepIndex].Rewards, rw)
		}
		t.Rewards = append(t.Rewards, rw)
	}
	return t, nil
}

// screenshot describes a step's screenshot and, when dir is set, writes its
// PNG there: the bytes in the step row, or the blob its hash names (which
// only a run that kept no pixels may lack).
func screenshot(ds *shard.Dataset, episode string, s *schemas.StepRow, dir string, noPixels bool) (*Screenshot, error) {
	shot := &Screenshot{SHA256: s.ScreenHash, Width: s.ScreenW, Height: s.ScreenH, Stored: "none"}
	png := s.Screenshot
	switch {
	case len(png) > 0:
		shot.Stored = "row"
	case s.ScreenHash != "":
		b, err := ds.Blob(s.ScreenHash)
		switch {
		case err == nil:
			shot.Stored, png = "blob", b
		case errors.Is(err, shard.ErrBlobNotFound) && noPixels:
			// pixels=none keeps the hash and size without the pixels.
		case errors.Is(err, shard.ErrBlobNotFound):
			return nil, fmt.Errorf("%w: episode %s step %d: screenshot %s is in no blob shard", shard.ErrCorrupt, episode, s.StepIndex, s.ScreenHash)
		default:
			return nil, err
		}
	}
	if dir == "" || png == nil {
		return shot, nil
	}
	shot.File = filepath.Join(dir, fmt.Sprintf("%s-step-%03d.png", episode, s.StepIndex))
	if err := os.WriteFile(shot.File, png, 0o644); err != nil {
		return nil, fmt.Errorf("inspect: -screenshots: %w", err)
	}
	return shot, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// readFailure is how a read of the episodes that stopped with err
// failed: nil when it ended or stopped at done (the episode was found), a
// damaged shard as ErrDamaged, anything else (a cancel) as it is.
func readFailure(err, done error) error {
	switch {
	case err == nil, errors.Is(err, done):
		return nil
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, shard.ErrCorrupt), errors.Is(err, shard.ErrBlobNotFound):
		return fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	return err
}
