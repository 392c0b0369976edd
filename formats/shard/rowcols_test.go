package shard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/forkline/forkline/schemas"
)

// sameRows reads every shard of table in the dataset at dir with
// parquet-go's row reader (the oracle) and column-wise, and fails on the
// first row that differs, field for field.
func sameRows[T any](t *testing.T, dir, table string) int {
	t.Helper()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, s := range d.Shards(table) {
		var want []T
		for row, err := range readShard[T](d.src, s, readBatchRows) {
			if err != nil {
				t.Fatalf("%s: row reader: %v", s.File, err)
			}
			want = append(want, row)
		}
		r, err := openColRows[T](d.src, s, layoutFor[T]())
		if err != nil {
			t.Fatalf("%s: %v", s.File, err)
		}
		var got []T
		for {
			row, err, ok := r.next()
			if !ok {
				break
			}
			if err != nil {
				r.close()
				t.Fatalf("%s: column-wise: %v", s.File, err)
			}
			got = append(got, row)
		}
		r.close()
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows column-wise, %d by the row reader", s.File, len(got), len(want))
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				g, w := reflect.ValueOf(got[i]), reflect.ValueOf(want[i])
				for f := range g.NumField() {
					if !reflect.DeepEqual(g.Field(f).Interface(), w.Field(f).Interface()) {
						t.Errorf("%s: row %d: field %s: column-wise %#v, row reader %#v", s.File, i, g.Type().Field(f).Name, g.Field(f).Interface(), w.Field(f).Interface())
					}
				}
				t.Fatalf("%s: row %d differs:\ncolumn-wise %+v\nrow reader  %+v", s.File, i, got[i], want[i])
			}
		}
		rows += len(want)
	}
	return rows
}

func sameDataset(t *testing.T, dir string) {
	t.Helper()
	n := sameRows[schemas.StepRow](t, dir, schemas.TableSteps)
	n += sameRows[schemas.EpisodeRow](t, dir, schemas.TableEpisodes)
	n += sameRows[schemas.RewardRow](t, dir, schemas.TableRewards)
	if n == 0 {
		t.Fatalf("%s: no rows read", dir)
	}
}

// The column-wise reader gives the row reader's rows, field for field: on
// a written dataset with every kind of column set and unset (several row
// groups and generations), on a schema-version-2 dataset (columns it
// lacks read as zero values), and on the datasets FORKLINE_ROWS_DIRS lists
// (colon-separated; a dataset corpus, generated datasets).
func TestColumnWiseRowsAreTheRowReaders(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(), smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	batches := commitRange(t, w, 0, 300)
	if err := w.Close(StatusComplete); err != nil {
		t.Fatal(err)
	}
	d, _ := Open(dir)
	if len(d.Shards(schemas.TableSteps)) < 2 {
		t.Fatalf("want several steps shards, got %d", len(d.Shards(schemas.TableSteps)))
	}
	sameDataset(t, dir)
	sameDataset(t, "testdata/v2-dataset")
	// Row groups of many windows (flatColumns), with their pages ending
	// inside windows: the default row group size.
	big := t.TempDir()
	w, err = Create(big, testManifest(), Config{RollBytes: 64 << 20, RowGroupBytes: DefaultRowGroupBytes, RollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1200 {
		b := makeBatch(testRunID, i)
		for j := range b.Steps {
			// long enough that a column's chunk is several pages
			b.Steps[j].Output += strings.Repeat(fmt.Sprintf(" %d.%d", i, j), 40)
		}
		if err := w.Commit(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(StatusComplete); err != nil {
		t.Fatal(err)
	}
	if rows, pages := largestGroup(t, big, schemas.TableSteps); rows <= 2*flatWindow || pages < 2 {
		t.Fatalf("the largest steps row group has %d rows in %d pages of a column; want over %d rows in several pages", rows, pages, 2*flatWindow)
	}
	sameDataset(t, big)
	for _, extra := range strings.Split(os.Getenv("FORKLINE_ROWS_DIRS"), ":") {
		if extra == "" {
			continue
		}
		matches, _ := filepath.Glob(filepath.Join(extra, "*", ManifestFile))
		if _, err := os.Stat(filepath.Join(extra, ManifestFile)); err == nil {
			matches = append(matches, filepath.Join(extra, ManifestFile))
		}
		for _, m := range matches {
			t.Run(filepath.Base(filepath.Dir(m)), func(t *testing.T) { sameDataset(t, filepath.Dir(m)) })
		}
	}
	// And EachEpisode, which reads this way, gives the episodes written.
	var got int
	if err := d.EachEpisode(func(ep schemas.EpisodeRow, st []schemas.StepRow, _ []schemas.RewardRow) error {
		want := batches[got]
		if !reflect.DeepEqual(normEpisode(ep), normEpisode(want.Episode)) || !reflect.DeepEqual(normSteps(st), normSteps(want.Steps)) {
			t.Fatalf("episode %d differs from the batch written", got)
		}
		got++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != len(batches) {
		t.Fatalf("EachEpisode gave %d episodes of %d", got, len(batches))
	}
}

// largestGroup returns the most rows a row group of table's shards has, and
// the most pages one of its column chunks has.
func largestGroup(t *testing.T, dir, table string) (rows int64, pages int) {
	t.Helper()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range d.Shards(table) {
		f, pf, err := d.src.open(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, rg := range pf.RowGroups() {
			rows = max(rows, rg.NumRows())
			for _, c := range rg.ColumnChunks() {
				ps := c.Pages()
				n := 0
				for {
					p, err := ps.ReadPage()
					if err != nil {
						break
					}
					parquet.Release(p)
					n++
				}
				ps.Close()
				pages = max(pages, n)
			}
		}
		f.Close()
	}
	return rows, pages
}
