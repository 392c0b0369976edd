// Package ui owns the text forkline prints for people: collect's and serve's
// run summaries (manifest.Collect, manifest.Serve), inspect's summary of a
// dataset (inspect.Summary) and an episode's transcript (inspect.Transcript).
// It turns the libraries' data types, which carry only data and their JSON
// form, into the lines the commands print; the JSON a command prints with
// -json is those types encoded as they are, not this package's business.
//
// Why a package and not cmd/forkline itself: the renderings have tests of
// their own (golden files in testdata/, fed by the types' JSON) that should
// not build and run the binary, and collect's tests check the summary text
// a run produced; a package both can import keeps one copy of each
// rendering. The libraries do not import it: it sits above them, beside the
// command (internal/archtest checks that no library prints to standard
// output or error, or has a Print or WriteText method for people).
//
// It must not know how the data was made (runs, pools, datasets on disk):
// it reads the values it is given and writes to the writer it is given,
// never to os.Stdout or os.Stderr itself. File formats and reports that are
// files (the replay HTML report, dataset cards, exports) and log records stay
// with the packages that write them.
package ui
