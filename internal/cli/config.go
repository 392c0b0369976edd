package cli

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Setting is one flag's values from somewhere other than the command line
// (a configuration file, a run's recorded configuration), each value as
// the flag would take it on the command line.
type Setting struct {
	Name   string
	Values []string
	// Where says where the setting comes from, for errors ("run.yaml:3").
	Where string
}

// Preset adds a source of settings: after the command line is parsed and
// before required flags are checked, fn's settings are applied to the
// flags the command line (and earlier presets) did not give; a key=value
// flag (KeyValues) that was given gets the keys it does not have yet. A flag given
// by a preset counts as given (Given). fn may read the flags parsed so far
// (Value, Given).
func (f *FlagSet) Preset(fn func(f *FlagSet) ([]Setting, error)) { f.presets = append(f.presets, fn) }

// Value is the flag's value as its help would show it, and whether the
// flag is defined.
func (f *FlagSet) Value(name string) (string, bool) {
	fl := f.fs.Lookup(name)
	if fl == nil {
		return "", false
	}
	return fl.Value.String(), true
}

// OnCommandLine reports whether the flag was on the command line itself
// (not from a preset).
func (f *FlagSet) OnCommandLine(name string) bool { return f.cmdline[name] }

// Resolved returns every flag that was given, on the command line or by a
// preset, but the common ones (-json, -quiet, logging) and those in skip:
// each with its values as they were given, in order. It is the
// configuration a run was started with, ready to be applied again as a
// preset.
func (f *FlagSet) Resolved(skip ...string) map[string][]string {
	out := map[string][]string{}
	for _, fl := range f.flags {
		if !f.given[fl.Name] || fl.Group == CommonGroup || slices.Contains(skip, fl.Name) {
			continue
		}
		out[fl.Name] = slices.Clone(*f.raw[fl.Name])
	}
	return out
}

// ConfigFlag defines -config FILE: a YAML mapping whose keys are the
// subcommand's flag names and whose values are what the flags take — a
// scalar, a list for a repeatable flag, a mapping for a key=value flag.
// Flags on the command line override the file's. An unknown key is
// refused with the file, its line and the known keys.
func (f *FlagSet) ConfigFlag(usage string) {
	var file string
	f.String(&file, "config", "FILE", usage)
	f.Preset(func(f *FlagSet) ([]Setting, error) {
		if file == "" {
			return nil, nil
		}
		return f.readConfig(file)
	})
}

// readConfig reads a -config file into settings.
func (f *FlagSet) readConfig(file string) ([]Setting, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("forkline %s: -config: %w", f.cmd, err)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("forkline %s: %s: %v", f.cmd, file, err)
	}
	at := func(n *yaml.Node, format string, args ...any) error {
		return fmt.Errorf("forkline %s: %s:%d: %s", f.cmd, file, n.Line, fmt.Sprintf(format, args...))
	}
	if len(doc.Content) == 0 {
		return nil, nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, at(root, "want a mapping of flag names to values (tasks: ..., out: ...)")
	}
	var known []string
	for _, fl := range f.flags {
		if fl.Name != "config" && fl.Group != CommonGroup {
			known = append(known, fl.Name)
		}
	}
	slices.Sort(known)
	var out []Setting
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := k.Value
		if k.Kind != yaml.ScalarNode || !slices.Contains(known, name) {
			hint := ""
			if s := closest(strings.TrimPrefix(name, "-"), known); s != "" {
				hint = fmt.Sprintf("; did you mean %s?", s)
			}
			return nil, at(k, "unknown key %q%s (known: %s)", name, hint, strings.Join(known, ", "))
		}
		if seen[name] {
			return nil, at(k, "%s is set twice", name)
		}
		seen[name] = true
		fl := f.byName[name]
		s := Setting{Name: name, Where: fmt.Sprintf("%s:%d", file, v.Line)}
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				return nil, at(v, "%s has no value", name)
			}
			s.Values = []string{v.Value}
		case yaml.SequenceNode:
			if !fl.Repeatable {
				return nil, at(v, "%s takes one value, not a list", name)
			}
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					return nil, at(item, "%s: want a list of values", name)
				}
				s.Values = append(s.Values, item.Value)
			}
		case yaml.MappingNode:
			if _, ok := f.fs.Lookup(name).Value.(*recorded).Value.(keyValues); !ok {
				return nil, at(v, "%s takes a value, not a mapping", name)
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				kk, vv := v.Content[j], v.Content[j+1]
				if kk.Kind != yaml.ScalarNode || vv.Kind != yaml.ScalarNode {
					return nil, at(kk, "%s: want key: value pairs", name)
				}
				s.Values = append(s.Values, kk.Value+"="+vv.Value)
			}
		default:
			return nil, at(v, "%s: want a value", name)
		}
		out = append(out, s)
	}
	return out, nil
}

// applyPresets applies every preset's settings to the flags not given yet.
func (f *FlagSet) applyPresets() error {
	f.cmdline = maps.Clone(f.given)
	for _, fn := range f.presets {
		settings, err := fn(f)
		if err != nil {
			return err
		}
		for _, s := range settings {
			fl := f.fs.Lookup(s.Name)
			if fl == nil {
				return fmt.Errorf("forkline %s: %s: unknown flag %q", f.cmd, s.Where, s.Name)
			}
			if f.given[s.Name] {
				// A key=value flag merges: the keys the command line
				// (or an earlier source) gave win, the others are added.
				if kv, ok := fl.Value.(*recorded).Value.(keyValues); ok {
					for _, v := range s.Values {
						k, _, _ := strings.Cut(v, "=")
						if _, set := kv[k]; !set {
							if err := fl.Value.Set(v); err != nil {
								return fmt.Errorf("forkline %s: %s: %s %q: %v", f.cmd, s.Where, s.Name, v, err)
							}
						}
					}
				}
				continue
			}
			for _, v := range s.Values {
				if err := fl.Value.Set(v); err != nil {
					return fmt.Errorf("forkline %s: %s: %s %q: %v", f.cmd, s.Where, s.Name, v, err)
				}
			}
			f.given[s.Name] = true
		}
	}
	return nil
}

// recorded wraps a flag's value to keep every value it is set to as given.
type recorded struct {
	flag.Value
	raw *[]string
}

func (r *recorded) Set(v string) error {
	if err := r.Value.Set(v); err != nil {
		return err
	}
	*r.raw = append(*r.raw, v)
	return nil
}

// IsBoolFlag lets package flag parse a wrapped boolean without a value.
func (r *recorded) IsBoolFlag() bool {
	b, ok := r.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
