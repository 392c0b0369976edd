package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/forkline/forkline/capture"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/policy"
	"github.com/forkline/forkline/task"
)

// Mismatch is one way a command differs from the dataset it would resume,
// in a way that changes what its episodes would be.
type Mismatch struct {
	// Field names what differs, by the manifest's names: "task",
	// "capture", "provider", "provider.<setting>", "policy",
	// "policy.<option>", "script", "conversation", "plan.<field>" (repeats,
	// seed, part, branch, from). A command turns it into its flag.
	Field string
	// Stored and Given are the dataset's value and the command's, as
	// shown; Note says why the difference matters, when it is not plain.
	Stored, Given, Note string
	// Text, when set, is the whole sentence (a task missing or edited, a
	// conversation that would differ): it has no flag to name.
	Text string
}

// Sentence says the mismatch, naming its field as label.
func (m Mismatch) Sentence(label string) string {
	if m.Text != "" {
		return m.Text
	}
	s := fmt.Sprintf("%s: the run used %s, this command gives %s", label, m.Stored, m.Given)
	if m.Note != "" {
		s += " (" + m.Note + ")"
	}
	return s
}

// ErrResumeMismatch is a refused resume: the command differs from the
// dataset in Dir in what its episodes would be, in every way listed.
type ErrResumeMismatch struct {
	Dir        string
	Mismatches []Mismatch
}

func (e *ErrResumeMismatch) Error() string {
	return e.Render(func(field string) string { return field })
}

// Render says the refusal with each mismatch's field named by label (a
// command gives its flag names).
func (e *ErrResumeMismatch) Render(label func(field string) string) string {
	lines := make([]string, len(e.Mismatches))
	for i, m := range e.Mismatches {
		lines[i] = m.Sentence(label(m.Field))
	}
	return fmt.Sprintf("%s: this command differs from the run in what its episodes would be:\n  %s", e.Dir, strings.Join(lines, "\n  "))
}

// Resuming is what a command would record, to be compared with the
// manifest of the dataset it resumes.
type Resuming struct {
	Tasks    []task.Spec
	Capture  capture.Policy
	Provider Provider // its name and settings
	Policy   Policy
}

// ResumeMismatches is the one rule for what a resume accepts, for every
// command that resumes a dataset (collect's -resume, serve's): the same
// tasks (by spec hash), capture policy, provider and every setting of it
// that shapes a sandbox (ProviderParamShapes), policy and every option of
// it that shapes what it does (PolicyOptionShapes), script and
// conversation. A manifest without a provider or policy entry (a run that
// crashed before an old writer recorded them) has nothing to compare. An
// entry that cannot be read is an error.
func ResumeMismatches(m shard.Manifest, now Resuming) ([]Mismatch, error) {
	var out []Mismatch
	text := func(format string, args ...any) {
		out = append(out, Mismatch{Field: "task", Text: fmt.Sprintf(format, args...)})
	}

	oldHash, err := task.RecordHashes(m.Tasks)
	if err != nil {
		return nil, err
	}
	for _, s := range now.Tasks {
		h, ok := oldHash[s.ID]
		if !ok {
			text("task %s is not in the run being resumed", s.ID)
			continue
		}
		if cur := s.Hash(); h != cur {
			text("task %s changed since the run started (spec hash %.12s, was %.12s)", s.ID, cur, h)
		}
		delete(oldHash, s.ID)
	}
	for _, id := range slices.Sorted(maps.Keys(oldHash)) {
		text("task %s of the run being resumed is not among the tasks given", id)
	}

	if m.Capture != nil {
		given := string(now.Capture.MarshalManifest())
		switch was, err := capture.DecodeManifest(m.Capture); {
		case err != nil:
			out = append(out, Mismatch{Field: "capture", Stored: compact(m.Capture), Given: given, Note: fmt.Sprintf("the run's entry is unreadable: %v", err)})
		case was != now.Capture:
			out = append(out, Mismatch{Field: "capture", Stored: compact(m.Capture), Given: given})
		}
	}

	if m.Provider != nil {
		was, err := DecodeProvider(m.Provider)
		if err != nil {
			return nil, fmt.Errorf("the manifest's provider entry is unreadable: %w", err)
		}
		if was.Name != now.Provider.Name {
			out = append(out, Mismatch{Field: "provider", Stored: was.Name, Given: now.Provider.Name})
		} else {
			out = append(out, was.SettingMismatches(now.Provider.Params)...)
		}
	}

	if m.Policy != nil {
		was, err := DecodePolicy(m.Policy)
		if err != nil {
			return nil, fmt.Errorf("the manifest's policy entry is unreadable: %w", err)
		}
		if was.Name != now.Policy.Name {
			out = append(out, Mismatch{Field: "policy", Stored: was.Name, Given: now.Policy.Name})
			return out, nil
		}
		for _, k := range settingKeys(was.Options, now.Policy.Options) {
			o, okO := was.Options[k]
			n, okN := now.Policy.Options[k]
			if optionShapes(now.Policy.Name, k) && (o != n || okO != okN) {
				out = append(out, Mismatch{Field: "policy." + k, Stored: settingValue(o, okO), Given: settingValue(n, okN)})
			}
		}
		nowSHA := ""
		if now.Policy.ScriptSHA256 != nil {
			nowSHA = *now.Policy.ScriptSHA256
		}
		switch {
		case was.ScriptSHA256 != nil && *was.ScriptSHA256 != nowSHA:
			out = append(out, Mismatch{Field: "script", Stored: scriptName(was.ScriptFile, *was.ScriptSHA256), Given: scriptName(now.Policy.ScriptFile, nowSHA)})
		case was.ScriptSHA256 == nil && (was.ScriptFile == "") != (now.Policy.ScriptFile == ""):
			out = append(out, Mismatch{Field: "script", Stored: scriptName(was.ScriptFile, ""), Given: scriptName(now.Policy.ScriptFile, "")})
		}
		if was.Conversation != nil {
			var nowConv policy.Conversation
			if now.Policy.Conversation != nil {
				nowConv = *now.Policy.Conversation
			}
			for _, k := range was.Conversation.Diff(nowConv) {
				out = append(out, Mismatch{Field: "conversation", Text: fmt.Sprintf("the conversation's %s differs from the run's (the model would be shown other messages)", k)})
			}
		}
	}
	return out, nil
}

// optionShapes reports whether a policy's option changes what it does; an
// option the table does not list does.
func optionShapes(name, key string) bool {
	if v, ok := PolicyOptionShapes[name][key]; ok {
		return v
	}
	return true
}

// SettingMismatches lists, sorted by setting, every setting that shapes a
// sandbox whose value in now differs from the one p was recorded with (one
// set and the other not counts).
func (p Provider) SettingMismatches(now map[string]string) []Mismatch {
	var out []Mismatch
	for _, k := range settingKeys(p.Params, now) {
		o, okO := p.Params[k]
		n, okN := now[k]
		if ProviderSettingShapes(p.Name, k) && (o != n || okO != okN) {
			out = append(out, Mismatch{Field: "provider." + k, Stored: settingValue(o, okO), Given: settingValue(n, okN),
				Note: fmt.Sprintf("it changes what a %s sandbox is", p.Name)})
		}
	}
	return out
}

func settingKeys(a, b map[string]string) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func scriptName(file, sha string) string {
	switch {
	case file == "":
		return "each task's solution"
	case sha == "":
		return file
	}
	return fmt.Sprintf("%s (sha256 %.12s)", file, sha)
}

func compact(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
