package cli

import (
	"fmt"
	"io"
	"strings"
)

// helpWidth is the width help text is wrapped to; flagColumn is where a
// flag's description starts.
const (
	helpWidth  = 100
	flagColumn = 26
)

// writeHelp writes a subcommand's help: what it does, its usage line, the
// required flags, each group of flags with its example, the positional
// arguments, examples and exit codes.
func writeHelp(w io.Writer, app string, c *Command, f *FlagSet) {
	fmt.Fprintf(w, "%s %s: %s\n\n", app, c.Name, c.Summary)
	fmt.Fprintf(w, "usage: %s\n", usageLine(app, c, f))
	if c.About != "" {
		fmt.Fprintln(w)
		for i, para := range strings.Split(strings.TrimSpace(c.About), "\n\n") {
			if i > 0 {
				fmt.Fprintln(w)
			}
			writeWrapped(w, "  ", "  ", strings.Join(strings.Fields(para), " "))
		}
	}
	writeArguments := func() {
		if len(c.Arguments) > 0 {
			fmt.Fprintf(w, "\narguments:\n")
			for _, a := range c.Arguments {
				writeEntry(w, a.Name, a.Usage)
			}
		}
	}
	flags := f.Flags()
	groups := f.Groups()
	if len(groups) == 0 || groups[0].Name != RequiredGroup {
		writeArguments()
	}
	for i, g := range groups {
		fmt.Fprintf(w, "\n%s:\n", g.Name)
		for _, fl := range flags {
			if fl.Group != g.Name {
				continue
			}
			head := "-" + fl.Name
			if fl.Arg != "" {
				head += " " + fl.Arg
			}
			text := fl.Usage
			if fl.Default != "" {
				text += " (default " + fl.Default + ")"
			}
			if fl.Repeatable {
				text += " [repeatable]"
			}
			writeEntry(w, head, text)
		}
		if g.Example != "" {
			writeWrapped(w, "    e.g. ", "         ", g.Example)
		}
		if i == 0 && g.Name == RequiredGroup {
			// The required flags first, then what the arguments are.
			writeArguments()
		}
	}
	for _, sec := range c.Sections {
		fmt.Fprintf(w, "\n%s:\n", sec.Title)
		for _, e := range sec.Entries {
			writeEntry(w, e.Name, e.Usage)
		}
	}
	if len(c.Examples) > 0 {
		fmt.Fprintf(w, "\nexamples:\n")
		for _, e := range c.Examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	if len(c.Exits) > 0 {
		fmt.Fprintf(w, "\nexit codes:\n")
		for _, e := range c.Exits {
			writeWrapped(w, fmt.Sprintf("  %-4d ", e.Code), "       ", e.Meaning)
		}
	}
}

// usageLine is "forkline collect -tasks FILE|DIR -out DIR [flags]": the
// required flags, the other flags, the positional arguments.
func usageLine(app string, c *Command, f *FlagSet) string {
	parts := []string{app, c.Name}
	if c.Args != "" && c.ArgsFirst {
		parts = append(parts, c.Args)
	}
	for _, fl := range f.Flags() {
		if fl.Required {
			parts = append(parts, "-"+fl.Name+" "+fl.Arg)
		}
	}
	parts = append(parts, "[flags]")
	if c.Args != "" && !c.ArgsFirst {
		parts = append(parts, c.Args)
	}
	return strings.Join(parts, " ")
}

// writeEntry writes "  head      text" with text wrapped at flagColumn,
// starting on the next line when head is too long for the column.
func writeEntry(w io.Writer, head, text string) {
	first := "  " + head
	pad := strings.Repeat(" ", flagColumn)
	if len(first) >= flagColumn-1 {
		fmt.Fprintln(w, first)
		first = pad
	} else {
		first += strings.Repeat(" ", flagColumn-len(first))
	}
	writeWrapped(w, first, pad, text)
}

// writeWrapped writes text in lines of at most helpWidth columns, the first
// line after first, the others after rest.
func writeWrapped(w io.Writer, first, rest, text string) {
	line := first
	empty := true
	for _, word := range strings.Fields(text) {
		if !empty && len(line)+1+len(word) > helpWidth {
			fmt.Fprintln(w, line)
			line, empty = rest, true
		}
		if empty {
			line += word
			empty = false
		} else {
			line += " " + word
		}
	}
	fmt.Fprintln(w, line)
}

// writeOverview writes the top-level help: the subcommands and the exit
// codes they share.
func writeOverview(w io.Writer, a *App) {
	fmt.Fprintf(w, "%s: %s\n\n", a.Name, a.Summary)
	fmt.Fprintf(w, "usage: %s SUBCOMMAND [flags] [arguments]\n\nsubcommands:\n", a.Name)
	for _, c := range a.commands() {
		fmt.Fprintf(w, "  %-10s%s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w)
	writeWrapped(w, "", "", fmt.Sprintf("%s help SUBCOMMAND (or %s SUBCOMMAND -h) shows a subcommand's flags; %s -version its version.", a.Name, a.Name, a.Name))
	var codes []string
	for _, c := range Codes() {
		codes = append(codes, fmt.Sprintf("%d %s", c, CodeName(c)))
	}
	writeWrapped(w, "exit codes: ", "            ", strings.Join(codes, ", ")+" (each subcommand's help says what they mean for it)")
}
