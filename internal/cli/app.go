package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string // one line, for the list of subcommands
	// About says what it does, in a few short paragraphs separated by
	// blank lines (wrapped by the help).
	About string
	// Args is the usage of the positional arguments ("DIR", "PART..."),
	// "" for none; ArgsFirst puts them before the flags in the usage line
	// ("forkline inspect DIR [flags]"). MinArgs and MaxArgs bound their
	// number (MaxArgs < 0: no bound).
	Args             string
	ArgsFirst        bool
	MinArgs, MaxArgs int
	// Arguments describe the positional arguments in the help.
	Arguments []Argument
	// Sections are more lists for the help, after the flags ("targets:").
	Sections []Section
	Examples []string
	Exits    []Exit
	// Setup defines the flags on f, bound to a fresh options struct, and
	// returns what runs the command once they are parsed. It is called
	// once per invocation (and once per help), so options never leak from
	// one invocation to the next.
	Setup func(f *FlagSet) Runner
}

// Argument is one positional argument in the help.
type Argument struct {
	Name  string `json:"name"`
	Usage string `json:"usage"`
}

// Section is a titled list in a subcommand's help.
type Section struct {
	Title   string     `json:"title"`
	Entries []Argument `json:"entries"`
}

// Runner runs a parsed subcommand and returns its exit code.
type Runner func(ctx context.Context, inv *Invocation) int

// Invocation is one run of a subcommand: its positional arguments, its
// output streams and what the common flags asked for.
type Invocation struct {
	App, Command string
	Args         []string
	Stdout       io.Writer
	Stderr       io.Writer
	// JSON and Quiet are the common flags -json and -quiet.
	JSON, Quiet bool

	flags   *FlagSet
	sig     *signals
	logger  *slog.Logger
	logOut  *lockedWriter // where the text logger writes: Stderr, or what SetStderr gave
	logJSON bool
}

// Given reports whether the flag name was on the command line.
func (inv *Invocation) Given(name string) bool { return inv.flags.Given(name) }

// Prefix is "forkline collect", which begins the command's own messages.
func (inv *Invocation) Prefix() string { return inv.App + " " + inv.Command }

// Errorf prints a message of the command's own (not a library error, which
// names its package already) on stderr: "forkline collect: ...".
func (inv *Invocation) Errorf(format string, args ...any) {
	if inv.logJSON {
		inv.logger.Error(fmt.Sprintf(inv.Prefix()+": "+format, args...))
		return
	}
	fmt.Fprintf(inv.Stderr, inv.Prefix()+": "+format+"\n", args...)
}

// Fail prints err on stderr (an error record with JSON logs) and returns
// code.
func (inv *Invocation) Fail(code int, err error) int {
	inv.PrintError(err)
	return code
}

// PrintError prints err on stderr, or logs it as an error record with JSON
// logs.
func (inv *Invocation) PrintError(err error) {
	if inv.logJSON {
		inv.logger.Error(err.Error())
		return
	}
	fmt.Fprintln(inv.Stderr, err)
}

// Notef prints a note on stderr unless -quiet.
func (inv *Invocation) Notef(format string, args ...any) {
	if !inv.Quiet {
		fmt.Fprintf(inv.Stderr, format+"\n", args...)
	}
}

// Notes is where progress and notes go: Stderr, or nowhere with -quiet.
func (inv *Invocation) Notes() io.Writer {
	if inv.Quiet {
		return discard{}
	}
	return inv.Stderr
}

// PrintJSON writes v on stdout as indented JSON.
func (inv *Invocation) PrintJSON(v any) error {
	enc := json.NewEncoder(inv.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// OnSecondSignal sets what runs, just before the process exits, when a
// second SIGINT or SIGTERM comes while the command is still stopping from
// the first (say what is left behind and how to finish). It replaces the
// default note. Without signal handling (Execute) it is never called.
func (inv *Invocation) OnSecondSignal(fn func()) {
	if inv.sig != nil {
		inv.sig.setOnSecond(fn)
	}
}

// App is the forkline command: its subcommands and the built-in help.
type App struct {
	Name    string // "forkline"
	Summary string
	// Commands in the order `forkline help` lists them; the help
	// subcommand is added after them.
	Commands []*Command
	// VersionCommand names the subcommand that --version runs.
	VersionCommand string
}

// commands returns the subcommands with help last.
func (a *App) commands() []*Command {
	return append(append([]*Command(nil), a.Commands...), a.helpCommand())
}

func (a *App) lookup(name string) (*Command, error) {
	var names []string
	for _, c := range a.commands() {
		if c.Name == name {
			return c, nil
		}
		names = append(names, c.Name)
	}
	suggest := ""
	if s := closest(name, names); s != "" {
		suggest = fmt.Sprintf("; did you mean %s?", s)
	}
	return nil, fmt.Errorf("%s: unknown subcommand %q%s (known: %s)", a.Name, name, suggest, strings.Join(names, ", "))
}

// Main runs the command line args (without the program name) with the
// signal handling every subcommand shares: the first SIGINT or SIGTERM
// cancels the context the subcommand runs under (it stops and exits
// ExitInterrupted, keeping what it must), a second one exits the process
// at once with ExitInterrupted.
func (a *App) Main(args []string, stdout, stderr io.Writer) int {
	ctx, sig := notifySignals(stderr, a.Name)
	defer sig.stop()
	return a.run(ctx, sig, args, stdout, stderr)
}

// Execute runs args under ctx without installing signal handlers (for
// tests, and for callers that own the signals).
func (a *App) Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return a.run(ctx, nil, args, stdout, stderr)
}

func (a *App) run(ctx context.Context, sig *signals, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		writeOverview(stderr, a)
		return ExitBadInput
	}
	switch args[0] {
	case "-h", "-help", "--help":
		writeOverview(stdout, a)
		return ExitOK
	case "-version", "--version":
		if a.VersionCommand != "" {
			args = append([]string{a.VersionCommand}, args[1:]...)
		}
	}
	if strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "%s: unknown flag %s: give a subcommand first (known flags before it: -h, -version)\n", a.Name, args[0])
		fmt.Fprintf(stderr, "run %s help for the subcommands\n", a.Name)
		return ExitBadInput
	}
	c, err := a.lookup(args[0])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return ExitBadInput
	}
	if sig != nil {
		sig.setName(a.Name + " " + c.Name)
	}
	f, runner := a.setup(c)
	positional, err := f.parse(args[1:])
	if errors.Is(err, errHelp) {
		writeHelp(stdout, a.Name, c, f)
		return ExitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return ExitBadInput
	}
	if err := checkArgs(a.Name, c, positional); err != nil {
		fmt.Fprintln(stderr, err)
		return ExitBadInput
	}
	// A subcommand writes to its streams from many goroutines (progress
	// lines, log records, notes from every replica). A file takes each
	// write whole; any other writer (a buffer in a caller's process) is
	// given one writer at a time.
	stdout, stderr = serialized(stdout), serialized(stderr)
	inv := &Invocation{App: a.Name, Command: c.Name, Args: positional, Stdout: stdout, Stderr: stderr,
		JSON: f.json, Quiet: f.quiet, flags: f, sig: sig}
	if f.logging {
		if err := inv.setupLogging(f.logFormat, f.logLevel, f.quiet); err != nil {
			fmt.Fprintln(stderr, err)
			return ExitBadInput
		}
	}
	return runner(ctx, inv)
}

// setup builds the subcommand's flag set.
func (a *App) setup(c *Command) (*FlagSet, Runner) {
	if err := checkExits(c.Name, c.Exits); err != nil {
		panic(err)
	}
	f := newFlagSet(c.Name)
	runner := c.Setup(f)
	f.addCommon()
	return f, runner
}

func checkArgs(app string, c *Command, args []string) error {
	switch {
	case c.MaxArgs >= 0 && len(args) > c.MaxArgs:
		if c.MaxArgs == 0 {
			return fmt.Errorf("%s %s: unexpected arguments %q (it takes flags only; see -h)", app, c.Name, args)
		}
		return fmt.Errorf("%s %s: unexpected arguments %q (usage: %s %s %s)", app, c.Name, args[c.MaxArgs:], app, c.Name, c.Args)
	case len(args) < c.MinArgs:
		return fmt.Errorf("%s %s: missing %s (usage: %s %s %s)", app, c.Name, c.Args, app, c.Name, c.Args)
	}
	return nil
}

// Help returns the help of subcommand name, exactly as `forkline name -h`
// prints it.
func (a *App) Help(name string) (string, error) {
	c, err := a.lookup(name)
	if err != nil {
		return "", err
	}
	f, _ := a.setup(c)
	var b strings.Builder
	writeHelp(&b, a.Name, c, f)
	return b.String(), nil
}

// Overview returns the top-level help, as `forkline help` prints it.
func (a *App) Overview() string {
	var b strings.Builder
	writeOverview(&b, a)
	return b.String()
}

// Reference is a subcommand as `forkline help -json` describes it.
type Reference struct {
	Name      string     `json:"name"`
	Summary   string     `json:"summary"`
	Usage     string     `json:"usage"`
	Arguments []Argument `json:"arguments,omitempty"`
	Sections  []Section  `json:"sections,omitempty"`
	Groups    []Group    `json:"groups"`
	Flags     []Flag     `json:"flags"`
	Examples  []string   `json:"examples,omitempty"`
	Exits     []Exit     `json:"exit_codes"`
}

// References describes every subcommand.
func (a *App) References() []Reference {
	var out []Reference
	for _, c := range a.commands() {
		f, _ := a.setup(c)
		out = append(out, Reference{Name: c.Name, Summary: c.Summary, Usage: usageLine(a.Name, c, f),
			Arguments: c.Arguments, Sections: c.Sections, Groups: f.Groups(), Flags: f.Flags(), Examples: c.Examples, Exits: c.Exits})
	}
	return out
}

// helpCommand is `forkline help [SUBCOMMAND]`.
func (a *App) helpCommand() *Command {
	return &Command{
		Name:    "help",
		Summary: "this overview, or a subcommand's flags (forkline help SUBCOMMAND)",
		About: "Without an argument, lists the subcommands. With one, prints its help: the same text as " +
			a.Name + " SUBCOMMAND -h. With -json, describes every subcommand, its flags and exit codes as JSON.",
		Args: "[SUBCOMMAND]", MaxArgs: 1,
		Examples: []string{a.Name + " help", a.Name + " help collect", a.Name + " help -json | jq '.[].name'"},
		Exits: []Exit{
			{ExitOK, "the help was printed"},
			{ExitBadInput, "an unknown subcommand (the known ones are listed)"},
		},
		Setup: func(f *FlagSet) Runner {
			return func(ctx context.Context, inv *Invocation) int {
				switch {
				case inv.JSON && len(inv.Args) == 0:
					if err := inv.PrintJSON(a.References()); err != nil {
						return inv.Fail(ExitFailed, err)
					}
				case inv.JSON:
					c, err := a.lookup(inv.Args[0])
					if err != nil {
						return inv.Fail(ExitBadInput, err)
					}
					for _, r := range a.References() {
						if r.Name == c.Name {
							if err := inv.PrintJSON(r); err != nil {
								return inv.Fail(ExitFailed, err)
							}
						}
					}
				case len(inv.Args) == 0:
					writeOverview(inv.Stdout, a)
				default:
					text, err := a.Help(inv.Args[0])
					if err != nil {
						return inv.Fail(ExitBadInput, err)
					}
					io.WriteString(inv.Stdout, text)
				}
				return ExitOK
			}
		},
	}
}
