package main

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/forkline/forkline/schemas"
)

// where is one -where filter: an episode column equal (or not) to one of
// some values.
type where struct {
	column string
	not    bool
	values []string
}

// whereColumns are the episode columns -where can test.
var whereColumns = map[string]func(e *schemas.EpisodeRow) string{
	"episode_id":     func(e *schemas.EpisodeRow) string { return e.EpisodeID },
	"run_id":         func(e *schemas.EpisodeRow) string { return e.RunID },
	"task_id":        func(e *schemas.EpisodeRow) string { return e.TaskID },
	"task_hash":      func(e *schemas.EpisodeRow) string { return e.TaskHash },
	"provider":       func(e *schemas.EpisodeRow) string { return e.Provider },
	"golden_id":      func(e *schemas.EpisodeRow) string { return e.GoldenID },
	"reset_strategy": func(e *schemas.EpisodeRow) string { return e.ResetStrategy },
	"reset_origin":   func(e *schemas.EpisodeRow) string { return e.ResetOrigin },
	"exit_reason":    func(e *schemas.EpisodeRow) string { return e.ExitReason },
	"token_drift":    func(e *schemas.EpisodeRow) string { return strconv.FormatBool(e.TokenDrift) },
	"has_tokens":     func(e *schemas.EpisodeRow) string { return strconv.FormatBool(len(e.ResponseIDs) > 0) },
}

func whereColumnNames() string {
	var n []string
	for k := range whereColumns {
		n = append(n, k)
	}
	slices.Sort(n)
	return strings.Join(n, ", ")
}

// parseWhere reads "column=v1,v2" or "column!=v1,v2".
func parseWhere(s string) (where, error) {
	col, vals, ok := strings.Cut(s, "=")
	w := where{}
	if !ok || col == "" {
		return w, fmt.Errorf("-where %q: want column=value[,value...] or column!=value[,value...]", s)
	}
	if c, found := strings.CutSuffix(col, "!"); found {
		col, w.not = c, true
	}
	if _, ok := whereColumns[col]; !ok {
		return w, fmt.Errorf("-where %q: unknown column %q (known: %s)", s, col, whereColumnNames())
	}
	w.column, w.values = col, strings.Split(vals, ",")
	return w, nil
}

func (w where) match(e *schemas.EpisodeRow) bool {
	return slices.Contains(w.values, whereColumns[w.column](e)) != w.not
}

func (w where) String() string {
	op := "="
	if w.not {
		op = "!="
	}
	return w.column + op + strings.Join(w.values, ",")
}

// splitPart is one named share of a -split.
type splitPart struct {
	name     string
	fraction float64
}

var splitName = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// parseSplit reads "train=0.95,test=0.05": names made of letters, digits
// and underscores, positive fractions summing to 1.
func parseSplit(s string) ([]splitPart, error) {
	var parts []splitPart
	sum := 0.0
	for _, item := range strings.Split(s, ",") {
		name, frac, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || !splitName.MatchString(name) {
			return nil, fmt.Errorf("-split %q: want name=fraction[,name=fraction...], names of letters, digits and _", s)
		}
		f, err := strconv.ParseFloat(frac, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("-split %q: fraction of %s must be a positive number", s, name)
		}
		if slices.ContainsFunc(parts, func(p splitPart) bool { return p.name == name }) {
			return nil, fmt.Errorf("-split %q: split %s named twice", s, name)
		}
		parts = append(parts, splitPart{name, f})
		sum += f
	}
	if math.Abs(sum-1) > 1e-9 {
		return nil, fmt.Errorf("-split %q: fractions sum to %g, not 1", s, sum)
	}
	return parts, nil
}

func splitNames(parts []splitPart) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.name
	}
	return out
}

// assignSplit places an episode by the hash of its id: the first 8 bytes
// of sha256(episode_id) as a fraction of 2^64, against the parts'
// cumulative fractions in flag order. The same id always lands in the same
// split, whatever else is exported with it.
func assignSplit(parts []splitPart, episodeID string) string {
	h := sha256.Sum256([]byte(episodeID))
	x := float64(binary.BigEndian.Uint64(h[:8])>>11) / (1 << 53) // [0, 1), exact in float64
	acc := 0.0
	for _, p := range parts {
		acc += p.fraction
		if x < acc {
			return p.name
		}
	}
	return parts[len(parts)-1].name
}
