package cli

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Flag is one flag as its subcommand's help shows it.
type Flag struct {
	Name string `json:"name"`
	// Arg names the value in the help ("DIR", "N"); "" for a boolean.
	Arg   string `json:"arg,omitempty"`
	Usage string `json:"usage"`
	// Default is the value when the flag is not given, as the help shows
	// it; "" when there is none worth showing (the zero value).
	Default  string `json:"default,omitempty"`
	Group    string `json:"group"`
	Required bool   `json:"required,omitempty"`
	// Repeatable: the flag may be given several times, its values add up.
	Repeatable bool `json:"repeatable,omitempty"`
}

// Group is a named set of flags in the help, with an example of them.
type Group struct {
	Name    string `json:"name"`
	Example string `json:"example,omitempty"`
}

// CommonGroup holds the flags every subcommand has.
const CommonGroup = "common"

// RequiredGroup is where the help lists the required flags, first.
const RequiredGroup = "required"

// FlagSet defines a subcommand's flags, bound to the fields of its options
// struct, and parses them. Flags may come before, between or after the
// positional arguments; "--" ends the flags.
type FlagSet struct {
	cmd     string
	fs      *flag.FlagSet
	flags   []*Flag
	byName  map[string]*Flag
	groups  []Group
	group   string
	renamed map[string]string // an old flag name → what to give instead
	given   map[string]bool
	// cmdline: the flags the command line itself gave (given also holds
	// the presets'); raw: every flag's values as given; presets: the
	// other sources of values (Preset, ConfigFlag).
	cmdline map[string]bool
	raw     map[string]*[]string
	presets []func(*FlagSet) ([]Setting, error)
	json    bool
	quiet   bool
	// logging: the subcommand logs (Logging); its -log-format and
	// -log-level.
	logging             bool
	logFormat, logLevel string
}

func newFlagSet(cmd string) *FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(discard{})
	fs.Usage = func() {}
	return &FlagSet{cmd: cmd, fs: fs, byName: map[string]*Flag{}, renamed: map[string]string{}, raw: map[string]*[]string{}}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Group starts a group: the flags defined after it belong to it, and its
// example closes it in the help.
func (f *FlagSet) Group(name, example string) {
	f.groups = append(f.groups, Group{Name: name, Example: example})
	f.group = name
}

// Renamed makes the old name of a flag (or a flag that moved elsewhere)
// fail with hint ("-tasks-from is now -tasks") instead of the plain
// unknown-flag error.
func (f *FlagSet) Renamed(old, hint string) { f.renamed[old] = hint }

func (f *FlagSet) define(v flag.Value, name, arg, usage string, isZero bool) *Flag {
	if _, dup := f.byName[name]; dup {
		panic("cli: flag -" + name + " defined twice in " + f.cmd)
	}
	fl := &Flag{Name: name, Arg: arg, Usage: usage, Group: f.group}
	if !isZero {
		fl.Default = v.String()
	}
	raw := new([]string)
	f.raw[name] = raw
	f.fs.Var(&recorded{Value: v, raw: raw}, name, usage)
	f.flags = append(f.flags, fl)
	f.byName[name] = fl
	return fl
}

// Require marks the flag required: the help lists it first, and parsing
// fails when it is missing.
func (fl *Flag) Require() *Flag { fl.Required = true; return fl }

// ShowDefault sets the default the help shows (for a flag whose zero value
// means something the help should name, e.g. "2 × -replicas").
func (fl *Flag) ShowDefault(s string) *Flag { fl.Default = s; return fl }

// String defines a string flag; its default is *p.
func (f *FlagSet) String(p *string, name, arg, usage string) *Flag {
	return f.define((*stringValue)(p), name, arg, usage, *p == "")
}

// Var defines a flag of any flag.Value (typed modes that refuse unknown
// values when parsed); its default is v's value unless it is empty.
func (f *FlagSet) Var(v flag.Value, name, arg, usage string) *Flag {
	return f.define(v, name, arg, usage, v.String() == "")
}

// Int defines an int flag; its default is *p.
func (f *FlagSet) Int(p *int, name, arg, usage string) *Flag {
	return f.define((*intValue)(p), name, arg, usage, *p == 0)
}

// Int64 defines an int64 flag; its default is *p.
func (f *FlagSet) Int64(p *int64, name, arg, usage string) *Flag {
	return f.define((*int64Value)(p), name, arg, usage, *p == 0)
}

// Float64 defines a float64 flag; its default is *p.
func (f *FlagSet) Float64(p *float64, name, arg, usage string) *Flag {
	return f.define((*float64Value)(p), name, arg, usage, *p == 0)
}

// Bool defines a boolean flag (-name, -name=false); its default is *p.
func (f *FlagSet) Bool(p *bool, name, usage string) *Flag {
	return f.define((*boolValue)(p), name, "", usage, !*p)
}

// Duration defines a duration flag ("30s", "5m"); its default is *p.
func (f *FlagSet) Duration(p *time.Duration, name, arg, usage string) *Flag {
	return f.define((*durationValue)(p), name, arg, usage, *p == 0)
}

// List defines a repeatable flag whose values are comma-separated lists
// (-task a,b -task c gives a, b, c). Empty items are dropped.
func (f *FlagSet) List(p *[]string, name, arg, usage string) *Flag {
	fl := f.define((*listValue)(p), name, arg, usage, true)
	fl.Repeatable = true
	return fl
}

// Strings defines a repeatable flag whose values are kept whole (a
// directory, or a filter whose value holds commas).
func (f *FlagSet) Strings(p *[]string, name, arg, usage string) *Flag {
	fl := f.define((*stringsValue)(p), name, arg, usage, true)
	fl.Repeatable = true
	return fl
}

// KeyValues defines a repeatable key=value flag filling m (which must not
// be nil); a key given twice keeps its last value.
func (f *FlagSet) KeyValues(m map[string]string, name, arg, usage string) *Flag {
	fl := f.define(keyValues(m), name, arg, usage, true)
	fl.Repeatable = true
	return fl
}

// Given reports whether the flag was on the command line.
func (f *FlagSet) Given(name string) bool { return f.given[name] }

// Flags returns the flags in the order the help shows them: the required
// ones, then each group's, then the common ones.
func (f *FlagSet) Flags() []Flag {
	var out []Flag
	for _, fl := range f.flags {
		if fl.Required {
			c := *fl
			c.Group = RequiredGroup
			out = append(out, c)
		}
	}
	for _, g := range f.groups {
		for _, fl := range f.flags {
			if !fl.Required && fl.Group == g.Name {
				out = append(out, *fl)
			}
		}
	}
	return out
}

// Groups returns the groups in order, the required one first when any flag
// is required.
func (f *FlagSet) Groups() []Group {
	var out []Group
	for _, fl := range f.flags {
		if fl.Required {
			out = append(out, Group{Name: RequiredGroup})
			break
		}
	}
	for _, g := range f.groups {
		for _, fl := range f.flags {
			if !fl.Required && fl.Group == g.Name {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// addCommon defines -json and -quiet, last, in the common group.
func (f *FlagSet) addCommon() {
	f.Group(CommonGroup, "")
	f.Bool(&f.json, "json", "print the result as one JSON document on stdout")
	f.Bool(&f.quiet, "quiet", "no progress or notes on stderr (errors are still printed)")
	if f.logging {
		f.addLogging()
	}
}

// errHelp is returned by parse for -h, -help and --help.
var errHelp = errors.New("help requested")

// parse parses args, flags and positional arguments in any order, and
// checks the required flags. Its errors are complete sentences for the
// user, prefixed "forkline CMD: ".
func (f *FlagSet) parse(args []string) ([]string, error) {
	var positional []string
	for {
		err := f.fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		if err != nil {
			return nil, f.explain(err)
		}
		rest := f.fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	f.given = map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	if err := f.applyPresets(); err != nil {
		return nil, err
	}
	var required, missing []string
	for _, fl := range f.flags {
		if fl.Required {
			required = append(required, "-"+fl.Name)
			if !f.given[fl.Name] {
				missing = append(missing, "-"+fl.Name)
			}
		}
	}
	if len(missing) > 0 {
		verb := "is"
		if len(required) > 1 {
			verb = "are"
		}
		what := "is missing"
		if len(missing) > 1 {
			what = "are missing"
		}
		return nil, fmt.Errorf("forkline %s: %s %s required (see -h); %s %s", f.cmd, andList(required), verb, andList(missing), what)
	}
	return positional, nil
}

// explain turns an error of package flag into one that names the
// subcommand and, for an unknown flag, lists the known ones.
func (f *FlagSet) explain(err error) error {
	msg := err.Error()
	name, unknown := strings.CutPrefix(msg, "flag provided but not defined: -")
	if !unknown {
		return fmt.Errorf("forkline %s: %s (see forkline %s -h)", f.cmd, msg, f.cmd)
	}
	if hint, ok := f.renamed[name]; ok {
		return fmt.Errorf("forkline %s: flag provided but not defined: -%s: %s", f.cmd, name, hint)
	}
	known := slices.Sorted(maps.Keys(f.byName))
	suggest := ""
	if s := closest(name, known); s != "" {
		suggest = fmt.Sprintf("; did you mean -%s?", s)
	}
	for i := range known {
		known[i] = "-" + known[i]
	}
	return fmt.Errorf("forkline %s: flag provided but not defined: -%s%s (known: %s)", f.cmd, name, suggest, strings.Join(known, ", "))
}

// closest returns the known name nearest to name when it is a likely typo
// (edit distance at most 2, or a prefix of exactly one name), else "".
func closest(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return best
	}
	var prefixed []string
	for _, k := range known {
		if strings.HasPrefix(k, name) {
			prefixed = append(prefixed, k)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// andList joins "a", "a and b", "a, b and c".
func andList(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// The flag.Value types. Their String shows the value as a user would type
// it; Set's errors are wrapped by package flag with the flag's name.

type stringValue string

func (s *stringValue) Set(v string) error { *s = stringValue(v); return nil }
func (s *stringValue) String() string     { return string(*s) }

type intValue int

func (i *intValue) Set(v string) error {
	n, err := strconv.ParseInt(v, 0, strconv.IntSize)
	if err != nil {
		return errors.New("not an integer")
	}
	*i = intValue(n)
	return nil
}
func (i *intValue) String() string { return strconv.Itoa(int(*i)) }

type int64Value int64

func (i *int64Value) Set(v string) error {
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil {
		return errors.New("not an integer")
	}
	*i = int64Value(n)
	return nil
}
func (i *int64Value) String() string { return strconv.FormatInt(int64(*i), 10) }

type float64Value float64

func (x *float64Value) Set(v string) error {
	n, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return errors.New("not a number")
	}
	*x = float64Value(n)
	return nil
}
func (x *float64Value) String() string { return strconv.FormatFloat(float64(*x), 'g', -1, 64) }

type boolValue bool

func (b *boolValue) Set(v string) error {
	x, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("want true or false")
	}
	*b = boolValue(x)
	return nil
}
func (b *boolValue) String() string   { return strconv.FormatBool(bool(*b)) }
func (b *boolValue) IsBoolFlag() bool { return true }

type durationValue time.Duration

func (d *durationValue) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("not a duration (e.g. 30s, 5m, 1h)")
	}
	*d = durationValue(x)
	return nil
}
func (d *durationValue) String() string { return time.Duration(*d).String() }

type listValue []string

func (l *listValue) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}
func (l *listValue) String() string { return strings.Join(*l, ",") }

type stringsValue []string

func (s *stringsValue) Set(v string) error { *s = append(*s, v); return nil }
func (s *stringsValue) String() string     { return strings.Join(*s, " ") }

type keyValues map[string]string

func (m keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	m[k] = v
	return nil
}

func (m keyValues) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}
