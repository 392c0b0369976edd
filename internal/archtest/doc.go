// Package archtest holds the architecture test: it reads the package layout
// table of the repository's README (columns package, owns, may import) and
// checks the module's real import graph against it, so the house cannot
// silently grow back into a tangle and the table cannot go stale. Beside it,
// the printing rule (a source scan): no library package writes to standard
// output or error or defines a Print or WriteText rendering for people; the
// command prints, through internal/ui.
//
// It has no code of its own outside its test; it must not be imported.
package archtest
