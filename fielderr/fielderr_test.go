package fielderr_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/forkline/forkline/fielderr"
)

var errSentinel = errors.New("lib: the sentinel")

func flags(field string) string {
	return map[string]string{"Out": "-out", "Resume": "-resume", "Force": "-force"}[field]
}

// A FieldError wrapped in context is found by errors.As with its field
// and value, and errors.Is still finds the sentinel it wraps.
func TestErrorsAsAndIs(t *testing.T) {
	base := fielderr.Errorf("lib", "Out", "/data/run", "holds another run: %w", errSentinel)
	err := fmt.Errorf("starting: %w", base)
	var fe *fielderr.Error
	if !errors.As(err, &fe) {
		t.Fatalf("errors.As found no *fielderr.Error in %v", err)
	}
	if fe.Field != "Out" || fe.Value != "/data/run" || fe.Pkg != "lib" {
		t.Errorf("got field %q value %q pkg %q", fe.Field, fe.Value, fe.Pkg)
	}
	if !errors.Is(err, errSentinel) {
		t.Errorf("errors.Is lost the sentinel through %v", err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is matched what it does not wrap")
	}
	if got, want := err.Error(), "starting: lib: Out /data/run: holds another run: lib: the sentinel"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// Words says every Error of a chain with the label, outer and inner ones,
// the fields a cause mentions too, and keeps a field the label does not
// know by its name.
func TestWords(t *testing.T) {
	inner := fielderr.New("", "Out", "/data/run", fs.ErrNotExist)
	outer := fielderr.New("lib", "Resume", "", inner)
	err := errors.Join(fmt.Errorf("wrapped: %w", outer),
		fielderr.New("lib", "", "", errors.New("Resume and Force contradict each other; Forced stays")).Mentions("Resume", "Force"),
		fielderr.New("lib", "Unknown", "3", errors.New("bad")),
		fielderr.Sentence("lib", "Out", "/data/run", "is not empty; Force replaces only a run").Mentions("Force"))
	want := "wrapped: lib: -resume: -out /data/run: file does not exist\n" +
		"lib: -resume and -force contradict each other; Forced stays\n" +
		"lib: Unknown 3: bad\n" +
		"lib: -out /data/run is not empty; -force replaces only a run"
	if got := fielderr.Words(err, flags); got != want {
		t.Errorf("Words =\n%s\nwant\n%s", got, want)
	}
	if got, want := fielderr.Words(err, nil), err.Error(); got != want {
		t.Errorf("Words with no label = %q, want Error() %q", got, want)
	}
	if fielderr.Words(nil, flags) != "" {
		t.Error("Words(nil) is not empty")
	}
}
