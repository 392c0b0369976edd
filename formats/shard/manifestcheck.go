package shard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/forkline/forkline/schemas"
)

// checkManifest refuses a manifest whose own bookkeeping does not hold
// together: the fields the writer owns are always consistent when it wrote
// them, so a difference means the file was damaged or edited, and a reader
// acting on it would read a shard twice, read outside the dataset, or carry
// wrong counts into the next manifest. It checks the manifest only; the
// shard files are checked against it by the readers and Verify.
func checkManifest(m Manifest) error {
	if m.RunID == "" {
		return errors.New("run_id is empty")
	}
	switch m.Status {
	case StatusRunning, StatusPartial, StatusComplete:
	default:
		return fmt.Errorf("status %q is not known (known: %s, %s, %s)", m.Status, StatusRunning, StatusPartial, StatusComplete)
	}
	rows := map[string]int64{}
	listed := map[string]int{}
	for i, s := range m.Shards {
		switch {
		case s.Generation < 0:
			return fmt.Errorf("shards[%d].generation: %d is negative", i, s.Generation)
		case s.Rows < 0:
			return fmt.Errorf("shards[%d].rows: %d is negative", i, s.Rows)
		case s.Bytes < 0:
			return fmt.Errorf("shards[%d].bytes: %d is negative", i, s.Bytes)
		case !isSHA256Hex(s.SHA256):
			return fmt.Errorf("shards[%d].sha256: %q is not 64 lowercase hex digits", i, s.SHA256)
		}
		if err := checkShardEntry(s); err != nil {
			return fmt.Errorf("shards[%d]: %w", i, err)
		}
		if j, dup := listed[s.File]; dup {
			return fmt.Errorf("shards[%d]: %s is listed already as shards[%d]", i, s.File, j)
		}
		listed[s.File] = i
		if rows[s.Table] > 1<<62-s.Rows { // no real dataset comes near; a sum must not wrap
			return fmt.Errorf("shards[%d].rows: %d makes table %s overflow", i, s.Rows, s.Table)
		}
		rows[s.Table] += s.Rows
	}
	for _, t := range slices.Sorted(maps.Keys(m.Counts)) {
		if !slices.Contains(schemas.Tables, t) {
			return fmt.Errorf("counts.%s: no such table (known: %v)", t, schemas.Tables)
		}
	}
	for _, t := range schemas.Tables {
		if m.Counts[t] != rows[t] {
			return fmt.Errorf("counts.%s: %d, but the listed shards hold %d rows", t, m.Counts[t], rows[t])
		}
	}
	return nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// jsonError says where in data a decoding error is, as line and column.
func jsonError(data []byte, err error) string {
	var offset int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		offset = syn.Offset
	case errors.As(err, &typ):
		offset = typ.Offset
	}
	if offset <= 0 || offset > int64(len(data)) {
		return err.Error()
	}
	// The error comes after reading offset bytes: the last one read is
	// where it is.
	before := data[:offset-1]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d: %v", line, col, err)
}
