package export

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/manifest"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/task"
)

// input is one opened dataset and what its manifest says.
type input struct {
	path  string
	ds    *shard.Dataset
	m     shard.Manifest
	tasks map[string]task.Spec
	// actions are the tasks' allowed actions, each computed once (describe).
	actions map[string][]runtime.ActionKind
	// conversation is how the run's policy talked to its model, as the
	// manifest's policy record shows it (manifest.Policy.Shown).
	conversation policy.Conversation
	noPixels     bool // capture pixels=none: hashes without blobs
	// forksMemory: the run's provider forked processes (its manifest's
	// capabilities), so a persistent shell went on in forks (aci.ExecShell).
	forksMemory bool
	read        int64
	selected    int64
}

// openInputs opens every input and reads its manifest's tasks and policy.
func openInputs(o Options, needTasks bool) ([]*input, error) {
	var out []*input
	for _, p := range o.Inputs {
		ds, err := shard.Open(p)
		if err != nil {
			return nil, badInput{fielderr.New("export", "Inputs", p, err)}
		}
		in := &input{path: p, ds: ds, m: ds.Manifest(), actions: map[string][]runtime.ActionKind{}}
		if len(out) > 0 && in.m.SchemaVersion != out[0].m.SchemaVersion {
			return nil, badField(fielderr.Sentence("export", "Inputs", p, "has schema version %d, Inputs %s has %d; export runs of one schema version together",
				in.m.SchemaVersion, out[0].path, out[0].m.SchemaVersion).Mentions("Inputs"))
		}
		in.tasks = map[string]task.Spec{}
		if len(in.m.Tasks) > 0 {
			if in.tasks, err = task.DecodeRecords(in.m.Tasks); err != nil {
				return nil, badInput{fielderr.New("export", "Inputs", p, err)}
			}
		} else if needTasks {
			return nil, badField(fielderr.Errorf("export", "Inputs", p, "the manifest records no task specs, so there is no instruction for the user message"))
		}
		if err := readPolicy(in); err != nil {
			return nil, badInput{fielderr.New("export", "Inputs", p, err)}
		}
		capt, err := capture.DecodeManifest(in.m.Capture)
		if err != nil {
			return nil, badInput{fielderr.New("export", "Inputs", p, err)}
		}
		in.noPixels = capt.Pixels == capture.PixelsNone
		if len(in.m.Provider) > 0 {
			prov, err := manifest.DecodeProvider(in.m.Provider)
			if err != nil {
				return nil, badInput{fielderr.New("export", "Inputs", p, err)}
			}
			in.forksMemory = prov.Capabilities != nil && prov.Capabilities.ForksMemory
		}
		out = append(out, in)
	}
	return out, nil
}

// readPolicy takes what shaped the model's conversation from the policy
// record the manifest holds: the conversation the collector recorded, or
// for older manifests and other tools' what the options say (see
// manifest.Policy.Shown). A policy that recorded no conversation and named
// no actions talked to no model (the script policy, a replay, serve's
// clients, a manifest without a policy entry): its episodes offer the
// tools their task allows (docs/TASKS.md), as a model of that task is
// offered them, never every canonical action; no system message, whole
// observations, enable_thinking unknown.
func readPolicy(in *input) error {
	in.conversation = policy.Conversation{TaskActions: true}
	if len(in.m.Policy) == 0 {
		return nil
	}
	rec, err := manifest.DecodePolicy(in.m.Policy)
	if err != nil {
		return err
	}
	if in.conversation, err = rec.Shown(); err != nil {
		return err
	}
	if rec.Conversation == nil && len(in.conversation.Actions) == 0 {
		in.conversation.TaskActions = true
	}
	return nil
}

// checkUniqueIDs refuses inputs that share an episode id. It holds the ids
// (not the rows) of all inputs: the one part of an export that grows with
// the dataset, by about 100 bytes per episode.
func checkUniqueIDs(ctx context.Context, inputs []*input) error {
	if len(inputs) < 2 {
		return nil
	}
	seen := map[string]int{}
	for i, in := range inputs {
		for ep, err := range in.ds.Episodes() {
			if errors.Is(err, shard.ErrCorrupt) {
				return corruptInput(in.path, err)
			}
			if err != nil {
				return fielderr.New("export", "Inputs", in.path, err)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if j, dup := seen[ep.EpisodeID]; dup {
				if j == i {
					return fielderr.Sentence("export", "Inputs", in.path, "holds episode %s twice: %w", ep.EpisodeID, shard.ErrCorrupt)
				}
				return badField(fielderr.Errorf("export", "", "", "episode %s is in both Inputs %s and Inputs %s; episode ids must be unique across inputs (the same run given twice?)",
					ep.EpisodeID, inputs[j].path, in.path).Mentions("Inputs"))
			}
			seen[ep.EpisodeID] = i
		}
	}
	return nil
}

// provenance is the card's source lines: runs, selection and split.
func provenance(o Options, inputs []*input) []string {
	var out []string
	for _, in := range inputs {
		out = append(out, fmt.Sprintf("run `%s` (%s, schema version %d, %s %s)", in.m.RunID, in.m.Status, in.m.SchemaVersion, in.m.Tool, in.m.ToolVersion))
	}
	sel := []string{"reward: `" + o.Reward + "`"}
	for _, w := range o.Where {
		sel = append(sel, "where `"+w.String()+"`")
	}
	if o.MinReward != nil {
		sel = append(sel, "min reward "+strconv.FormatFloat(*o.MinReward, 'g', -1, 64))
	}
	if o.MaxReward != nil {
		sel = append(sel, "max reward "+strconv.FormatFloat(*o.MaxReward, 'g', -1, 64))
	}
	if len(o.Tasks) > 0 {
		sel = append(sel, "tasks "+strings.Join(o.Tasks, ", "))
	}
	if len(o.Episodes) > 0 {
		sel = append(sel, "episode ids starting "+strings.Join(o.Episodes, ", "))
	}
	out = append(out, "selection: "+strings.Join(sel, "; "))
	out = append(out, "split: "+splitText(o.Split)+" by the first 8 bytes of sha256(episode_id)")
	return out
}
