package shard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/forkline/forkline/schemas"
)

// FuzzDecodeManifest feeds arbitrary bytes to the manifest decoding that
// Open, Resume and Verify share. Its seeds are manifests of real collect
// runs (testdata/fuzz/FuzzDecodeManifest) and one this test writes.
// Whatever the input:
//
//   - decoding does not panic, and a refusal is ErrCorrupt or
//     ErrSchemaVersion naming the file;
//   - an accepted manifest is consistent: this build's schema version, a
//     run id, a known status, every shard a known table's file in its own
//     directory with sane numbers, no file listed twice, counts that are
//     the listed rows per table;
//   - written back as writeManifest writes it, it decodes to the same
//     manifest (a resumed run does not drift), and Clone is a deep copy.
func FuzzDecodeManifest(f *testing.F) {
	dir := f.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	if err != nil {
		f.Fatal(err)
	}
	for i := range 3 {
		if err := w.Commit(f.Context(), makeBatch(testRunID, i)); err != nil {
			f.Fatal(err)
		}
		if err := w.Roll(); err != nil {
			f.Fatal(err)
		}
	}
	if err := w.Close(StatusPartial); err != nil {
		f.Fatal(err)
	}
	written, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(written)
	f.Add([]byte(`{"schema_version":3,"run_id":"r","status":"running","shards":[],"counts":{}}`))
	f.Add([]byte(`{"schema_version":2,"run_id":"r","status":"complete","shards":[{"file":"steps/part-00000.parquet","table":"steps","generation":0,"rows":1,"bytes":9,"sha256":"` + strings.Repeat("a", 64) + `"}],"counts":{"steps":1}}`))

	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeManifest("fuzz/manifest.json", data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrSchemaVersion) {
				t.Fatalf("refusal %v is neither ErrCorrupt nor ErrSchemaVersion", err)
			}
			if !strings.Contains(err.Error(), "fuzz/manifest.json") {
				t.Fatalf("refusal %q does not name the file", err)
			}
			return
		}
		checkConsistent(t, m)

		// What the writer would write back reads back the same.
		again, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatalf("an accepted manifest does not encode: %v", err)
		}
		m2, err := decodeManifest("again.json", again)
		if err != nil {
			t.Fatalf("an accepted manifest, written back, is refused: %v\n%s", err, again)
		}
		third, err := json.MarshalIndent(m2, "", "  ")
		if err != nil || !bytes.Equal(again, third) {
			t.Fatalf("written back twice, the manifest changes (%v):\n%s\n----\n%s", err, again, third)
		}

		// Clone is deep: changing the copy leaves the original alone.
		before, _ := json.Marshal(m)
		c := m.Clone()
		for i := range c.Shards {
			c.Shards[i].Rows++
		}
		for k := range c.Counts {
			c.Counts[k]++
		}
		for _, raw := range []json.RawMessage{c.Provider, c.Policy, c.Capture, c.Tasks, c.Plan, c.Summary} {
			for i := range raw {
				raw[i] = 'x'
			}
		}
		if after, _ := json.Marshal(m); !bytes.Equal(before, after) {
			t.Fatal("changing a Clone changed the original")
		}
	})
}

// checkConsistent fails t unless m keeps the manifest's invariants. It is
// written apart from checkManifest, from the rules as documented.
func checkConsistent(t *testing.T, m Manifest) {
	t.Helper()
	if !schemas.Readable(m.SchemaVersion) || m.RunID == "" || m.Counts == nil {
		t.Fatalf("accepted: schema %d, run id %q, counts %v", m.SchemaVersion, m.RunID, m.Counts)
	}
	if !slices.Contains([]Status{StatusRunning, StatusPartial, StatusComplete}, m.Status) {
		t.Fatalf("accepted status %q", m.Status)
	}
	rows := map[string]int64{}
	files := map[string]bool{}
	for _, s := range m.Shards {
		want := fmt.Sprintf("%s/part-%05d.parquet", s.Table, s.Generation)
		if !slices.Contains(schemas.Tables, s.Table) || s.File != want || s.Generation < 0 || s.Rows < 0 || s.Bytes < 0 ||
			len(s.SHA256) != 64 || strings.Trim(s.SHA256, "0123456789abcdef") != "" {
			t.Fatalf("accepted shard entry %+v", s)
		}
		if files[s.File] {
			t.Fatalf("accepted %s listed twice", s.File)
		}
		files[s.File] = true
		rows[s.Table] += s.Rows
	}
	for k, v := range m.Counts {
		if rows[k] != v || !slices.Contains(schemas.Tables, k) {
			t.Fatalf("accepted counts %v for rows %v", m.Counts, rows)
		}
	}
	for k, v := range rows {
		if m.Counts[k] != v {
			t.Fatalf("accepted counts %v for rows %v", m.Counts, rows)
		}
	}
	gens := m.Generations()
	if !slices.IsSorted(gens) || len(slices.Compact(slices.Clone(gens))) != len(gens) {
		t.Fatalf("generations %v are not ascending and distinct", gens)
	}
}
