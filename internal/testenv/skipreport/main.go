// Command skipreport reads `go test -json` on its standard input and lists
// the tests that skipped for a missing outside component: test, component,
// reason (internal/testenv's "testenv: COMPONENT missing: REASON" line), and
// once per component the command that installs it. It exits non-zero when
// a test or a package failed, or when a test skipped without going through
// testenv (a skip that names no component is a test that decided on its
// own). .ci/run pipes the suite run with every component hidden
// (FORKLINE_HIDE=all) through it.
//
//	FORKLINE_HIDE=all go test -json -count=1 ./... | go run ./internal/testenv/skipreport
//
// It knows the form of testenv's skip message and go test's JSON events
// (cmd/test2json), nothing of the tests.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/forkline/forkline/internal/testenv"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output and build-fail events
}

// testKey names one test of one package.
type testKey struct{ pkg, test string }

// skip is one component skip.
type skip struct {
	testKey
	component, reason string
}

// marker is testenv's skip line, as `go test` prints it: the file and line,
// then "testenv: COMPONENT missing: REASON" (Missing) or "testenv: not
// applicable: REASON" (Inapplicable).
var marker = regexp.MustCompile(`^\s*\S+\.go:\d+: testenv: (?:(\S+) missing|(not applicable)): (.*)$`)

type report struct {
	outputs map[testKey][]string
	skips   []skip
	// inapplicable are the skips of tests that do not apply here (no
	// component missing: testenv.Inapplicable).
	inapplicable []skip
	unnamed      []testKey // skipped without a testenv line
	failed       []testKey // Test "" is the package
	build        []string  // packages that did not build
	passed       int
	packages     map[string]bool
}

func read(r io.Reader) (*report, error) {
	rep := &report{outputs: map[testKey][]string{}, packages: map[string]bool{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			// go test writes build errors as plain text before its
			// JSON when -json cannot carry them.
			fmt.Fprintf(os.Stderr, "%s\n", line)
			continue
		}
		k := testKey{e.Package, e.Test}
		switch e.Action {
		case "output":
			rep.outputs[k] = append(rep.outputs[k], e.Output)
		case "build-fail":
			rep.build = append(rep.build, e.ImportPath)
		case "fail":
			rep.failed = append(rep.failed, k)
		case "pass":
			if e.Test != "" {
				rep.passed++
			} else {
				rep.packages[e.Package] = true
			}
		case "skip":
			if e.Test == "" {
				continue // a package without tests
			}
			rep.classify(k)
		}
	}
	return rep, sc.Err()
}

// classify files a skipped test under its component, or as unnamed.
func (rep *report) classify(k testKey) {
	for _, out := range rep.outputs[k] {
		for _, l := range strings.Split(out, "\n") {
			if m := marker.FindStringSubmatch(l); m != nil {
				if m[2] != "" {
					rep.inapplicable = append(rep.inapplicable, skip{testKey: k, reason: m[3]})
				} else {
					rep.skips = append(rep.skips, skip{testKey: k, component: m[1], reason: m[3]})
				}
				return
			}
		}
	}
	rep.unnamed = append(rep.unnamed, k)
}

func (rep *report) write(w io.Writer) (ok bool) {
	sort.Slice(rep.skips, func(a, b int) bool {
		if rep.skips[a].pkg != rep.skips[b].pkg {
			return rep.skips[a].pkg < rep.skips[b].pkg
		}
		return rep.skips[a].test < rep.skips[b].test
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PACKAGE\tTEST\tCOMPONENT\tREASON")
	const module = "github.com/forkline/forkline/"
	for _, s := range rep.skips {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.TrimPrefix(s.pkg, module), s.test, s.component, s.reason)
	}
	tw.Flush()

	count := map[string]int{}
	for _, s := range rep.skips {
		count[s.component]++
	}
	fmt.Fprintf(w, "\n%d tests passed in %d packages; %d skipped for a missing component:\n", rep.passed, len(rep.packages), len(rep.skips))
	for _, c := range testenv.Components() {
		if n := count[c.Name]; n > 0 {
			fmt.Fprintf(w, "  %-16s %3d  install: %s\n", c.Name, n, c.Install)
			delete(count, c.Name)
		}
	}
	if len(rep.inapplicable) > 0 {
		fmt.Fprintf(w, "%d skipped as not applicable here (no component missing):\n", len(rep.inapplicable))
		for _, s := range rep.inapplicable {
			fmt.Fprintf(w, "  %s %s: %s\n", strings.TrimPrefix(s.pkg, module), s.test, s.reason)
		}
	}
	ok = true
	if rep.passed == 0 && len(rep.failed) == 0 && len(rep.build) == 0 {
		fmt.Fprintln(w, "NO TEST RAN: the input holds no test event (did go test -json run?)")
		ok = false
	}
	for name, n := range count { // a name testenv does not know: it refuses those, so never
		fmt.Fprintf(w, "  %-16s %3d  (no such component in internal/testenv)\n", name, n)
		ok = false
	}
	for _, k := range rep.unnamed {
		fmt.Fprintf(w, "SKIPPED WITHOUT testenv: %s %s: a test that needs a component asks internal/testenv\n", strings.TrimPrefix(k.pkg, module), k.test)
		for _, out := range rep.outputs[k] {
			fmt.Fprintf(w, "    %s", out)
		}
		ok = false
	}
	for _, p := range rep.build {
		fmt.Fprintf(w, "BUILD FAILED: %s\n", p)
		ok = false
	}
	for _, k := range rep.failed {
		if k.test == "" {
			fmt.Fprintf(w, "FAILED: package %s\n", strings.TrimPrefix(k.pkg, module))
		} else {
			fmt.Fprintf(w, "FAILED: %s %s\n", strings.TrimPrefix(k.pkg, module), k.test)
			for _, out := range rep.outputs[k] {
				fmt.Fprintf(w, "    %s", out)
			}
		}
		ok = false
	}
	return ok
}

func main() {
	rep, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipreport: reading go test -json:", err)
		os.Exit(2)
	}
	if !rep.write(os.Stdout) {
		os.Exit(1)
	}
}
