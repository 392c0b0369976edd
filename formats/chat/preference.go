package chat

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/forkline/forkline/export/model"
)

// PreferenceLine is one preference pair in TRL's conversational preference
// form with an explicit prompt (dataset_formats.md: prompt, chosen,
// rejected, each a list of messages): two trajectories of one group — the
// branches of one branch point, or the episodes of one task spec — whose
// rewards differ. The prompt is what they share: the instruction and the
// prefix steps before the branch point; chosen and rejected are each
// side's own turns after it. The other fields say where the pair comes
// from (DPOTrainer ignores them).
type PreferenceLine struct {
	Prompt            []LineMessage   `json:"prompt"`
	Chosen            []LineMessage   `json:"chosen"`
	Rejected          []LineMessage   `json:"rejected"`
	Tools             json.RawMessage `json:"tools,omitempty"`
	GroupID           string          `json:"group_id"`
	ChosenEpisodeID   string          `json:"chosen_episode_id"`
	RejectedEpisodeID string          `json:"rejected_episode_id"`
	ChosenReward      float64         `json:"chosen_reward"`
	RejectedReward    float64         `json:"rejected_reward"`
}

// ErrNoPairs is returned by PreferenceWriter.Close when no group held two
// trajectories with different rewards: there is nothing to prefer.
var ErrNoPairs = errors.New("chat: no preference pair: no group has two trajectories whose rewards differ")

// PreferenceWriter writes DIR/<split>.jsonl of preference pairs. It holds
// the trajectories of a group until all of the group's (Episode.GroupSize)
// are seen, then writes every pair of them whose rewards differ, the
// higher one chosen — so memory holds the groups still open, not the
// dataset. Trajectories without a reward are not paired. Pairs are made
// within a split (the exporter draws a branch's split from its parent, so
// the branches of one prefix share one).
type PreferenceWriter struct {
	files map[string]*jsonlFile
	args  ToolArgs
	open  map[string]*openGroup // by split and group
	pairs int
	err   error
}

// member is one trajectory of an open group, already encoded.
type member struct {
	id       string
	reward   float64
	prefix   []LineMessage // the messages of its prefix steps
	own      []LineMessage // the messages after them
	tools    json.RawMessage
	rewarded bool
}

type openGroup struct {
	split, group string
	size, seen   int
	members      []member
}

// NewPreferenceWriter creates DIR/<split>.jsonl for each split.
func NewPreferenceWriter(dir string, splits []string, args ToolArgs) (*PreferenceWriter, error) {
	w := &PreferenceWriter{files: map[string]*jsonlFile{}, args: args, open: map[string]*openGroup{}}
	for _, s := range splits {
		f, err := os.Create(filepath.Join(dir, s+".jsonl"))
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("chat: %w", err)
		}
		w.files[s] = &jsonlFile{f: f, bw: bufio.NewWriterSize(f, 256<<10)}
	}
	return w, nil
}

// Write adds ep to its group, and writes the group's pairs once the group
// is complete.
func (w *PreferenceWriter) Write(ep *model.Episode) error {
	if w.err != nil {
		return w.err
	}
	if _, ok := w.files[ep.Split]; !ok {
		return fmt.Errorf("chat: episode %s: unknown split %q", ep.Row.EpisodeID, ep.Split)
	}
	m, err := w.encode(ep)
	if err != nil {
		return err
	}
	key := ep.Split + "\x00" + ep.Group
	g := w.open[key]
	if g == nil {
		g = &openGroup{split: ep.Split, group: ep.Group, size: ep.GroupSize}
		w.open[key] = g
	}
	g.seen++
	if m.rewarded {
		g.members = append(g.members, m)
	}
	if g.size > 0 && g.seen >= g.size {
		delete(w.open, key)
		return w.flush(g)
	}
	return nil
}

// encode splits ep's conversation at its prefix.
func (w *PreferenceWriter) encode(ep *model.Episode) (member, error) {
	m := member{id: ep.Row.EpisodeID}
	if r := ep.Reward(); r != nil {
		m.reward, m.rewarded = *r, true
	}
	full, err := Encode(ep, nil, w.args)
	if err != nil {
		return m, err
	}
	var line Line
	if err := json.Unmarshal(full, &line); err != nil {
		return m, fmt.Errorf("chat: %w", err)
	}
	prefixEp := *ep
	prefixEp.Steps = ep.Steps[:min(ep.PrefixSteps, len(ep.Steps))]
	msgs, err := model.Messages(&prefixEp)
	if err != nil {
		return m, err
	}
	m.prefix, m.own = line.Messages[:len(msgs)], line.Messages[len(msgs):]
	if t := ep.Tools(); t != nil {
		if m.tools, err = model.EncodeJSON(t); err != nil {
			return m, err
		}
	}
	return m, nil
}

// flush writes every pair of g's members whose rewards differ: the higher
// reward chosen, in the order the members came (so the output is
// deterministic for a deterministic input).
func (w *PreferenceWriter) flush(g *openGroup) error {
	ms := slices.Clone(g.members)
	slices.SortStableFunc(ms, func(a, b member) int { return cmp.Compare(b.reward, a.reward) })
	f := w.files[g.split]
	for i := range ms {
		for j := i + 1; j < len(ms); j++ {
			hi, lo := ms[i], ms[j]
			if hi.reward == lo.reward {
				continue
			}
			// Siblings share their prefix by construction; the prompt is
			// the chosen side's (the rejected side's is the same messages).
			line := PreferenceLine{Prompt: hi.prefix, Chosen: hi.own, Rejected: lo.own, Tools: hi.tools, GroupID: g.group,
				ChosenEpisodeID: hi.id, RejectedEpisodeID: lo.id, ChosenReward: hi.reward, RejectedReward: lo.reward}
			b, err := model.EncodeJSON(line)
			if err != nil {
				return err
			}
			if _, err := f.bw.Write(append(b, '\n')); err != nil {
				w.err = fmt.Errorf("chat: %w", err)
				return w.err
			}
			w.pairs++
		}
	}
	return nil
}

// Pairs is how many pairs were written so far.
func (w *PreferenceWriter) Pairs() int { return w.pairs }

// Close writes the groups still open (some of their trajectories were
// filtered out or refused), then flushes, syncs and closes every file. It
// returns ErrNoPairs when no pair was written.
func (w *PreferenceWriter) Close() error {
	var errs []error
	if w.err == nil {
		keys := make([]string, 0, len(w.open))
		for k := range w.open {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := w.flush(w.open[k]); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	for _, s := range slices.Sorted(func(yield func(string) bool) {
		for s := range w.files {
			if !yield(s) {
				return
			}
		}
	}) {
		f := w.files[s]
		errs = append(errs, f.bw.Flush(), f.f.Sync(), f.f.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	if w.pairs == 0 && w.err == nil {
		return ErrNoPairs
	}
	return nil
}
