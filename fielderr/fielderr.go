// Package fielderr owns the error a library returns about one field of the
// configuration its caller gave it (collect.Config, serve.Config,
// replay.Config, export.Options): the field by its Go name, the value as
// given, and the cause. It must not know the command line: a program that
// embeds collect.Run sets Config.Out, not -out, so a library names the
// field, and cmd/forkline says each field as the flag that sets it
// (Render with its label, cmd/forkline/flagwords.go).
//
// The decision on the words: Error says the field by its bare Go name
// after the package's name ("collect: Out /data/run: ..."), not
// "Config.Out": the package already says whose configuration it is, and a
// capitalised identifier reads as a field to a Go programmer.
package fielderr

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Error is a refused or failing value of one configuration field.
type Error struct {
	// Pkg is the library that says it: "collect", "export", "serve", ...
	Pkg string
	// Field is the Go name of the field the error is about ("Out",
	// "Branch", "MaxLoss"); empty when the error is about the fields in
	// Also only.
	Field string
	// Value is the field's value as given, as shown; empty when it says
	// nothing (a switch, an unset field).
	Value string
	// Err is the cause; errors.Is and errors.As see through to it.
	Err error
	// Inline says the cause continues the sentence the field and its
	// value begin ("Out /data/run is not empty"): no colon between them.
	Inline bool
	// Also are the other fields the cause's text names, each by its Go
	// name as a whole word ("Resume and Force contradict each other"):
	// Render says them with the label too.
	Also []string
}

// New is the error about field (with its value, or "") of pkg's
// configuration, caused by err.
func New(pkg, field, value string, err error) *Error {
	return &Error{Pkg: pkg, Field: field, Value: value, Err: err}
}

// Errorf is New with a cause made by fmt.Errorf (so %w wraps).
func Errorf(pkg, field, value, format string, args ...any) *Error {
	return New(pkg, field, value, fmt.Errorf(format, args...))
}

// Sentence is Errorf for a cause that continues the sentence the field
// and its value begin: "collect: Out /data/run is not empty".
func Sentence(pkg, field, value, format string, args ...any) *Error {
	e := Errorf(pkg, field, value, format, args...)
	e.Inline = true
	return e
}

// Mentions is e with the cause's text naming the fields also.
func (e *Error) Mentions(also ...string) *Error {
	e.Also = append(e.Also, also...)
	return e
}

func (e *Error) Error() string { return e.Render(nil) }

func (e *Error) Unwrap() error { return e.Err }

// Render says e with every field it names said by label (a command gives
// its flag names); a nil label, or one that returns "", keeps the field's
// Go name. A cause that is itself (or wraps) an Error is left as it says
// itself: Words renders a whole chain.
func (e *Error) Render(label func(field string) string) string {
	name := func(f string) string {
		if label != nil {
			if l := label(f); l != "" {
				return l
			}
		}
		return f
	}
	var b strings.Builder
	if e.Pkg != "" {
		b.WriteString(e.Pkg)
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(name(e.Field))
		if e.Value != "" {
			b.WriteString(" ")
			b.WriteString(e.Value)
		}
		switch {
		case e.Err == nil:
		case e.Inline:
			b.WriteString(" ")
		default:
			b.WriteString(": ")
		}
	}
	if e.Err != nil {
		cause := e.Err.Error()
		for _, f := range e.Also {
			cause = wordRe(f).ReplaceAllLiteralString(cause, name(f))
		}
		b.WriteString(cause)
	}
	return b.String()
}

func wordRe(field string) *regexp.Regexp {
	return regexp.MustCompile(`\b` + regexp.QuoteMeta(field) + `\b`)
}

// Words is err's text with every Error in its chain (through Unwrap and
// Join) rendered with label: what a command prints.
func Words(err error, label func(field string) string) string {
	if err == nil {
		return ""
	}
	text := err.Error()
	walk(err, func(e *Error) {
		text = strings.Replace(text, e.Error(), e.Render(label), 1)
	})
	return text
}

// walk calls fn on every Error in err's tree, outer ones first, so that an
// outer one is replaced before the inner ones its text holds.
func walk(err error, fn func(*Error)) {
	if err == nil {
		return
	}
	if e, ok := err.(*Error); ok {
		fn(e)
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, c := range u.Unwrap() {
			walk(c, fn)
		}
	default:
		walk(errors.Unwrap(err), fn)
	}
}
