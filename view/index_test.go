package view

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/benchmarks/datagen"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/inspect"
	"github.com/forkline/forkline/schemas"
)

// The index's answers against the selection inspect.EachEpisode makes
// with the same export.Filter (row by row, from the stored rows), and its
// text search against every step read whole, on a generated dataset of
// many small generations and row groups (shards read in parallel).
func TestIndexAnswersAsTheRowReaders(t *testing.T) {
	dir := t.TempDir() + "/run"
	_, err := datagen.Generate(context.Background(), datagen.Config{Dir: dir, Episodes: 240,
		Shards: shard.Config{RollBytes: 48 << 10, RowGroupBytes: 8 << 10}})
	require.NoError(t, err)
	ds, err := shard.Open(dir)
	require.NoError(t, err)
	gens := len(ds.Shards(schemas.TableEpisodes))
	require.Greater(t, gens, 3, "several generations, read in parallel")

	// Text: the episodes some step of which holds it, read row by row.
	withText := func(text string) map[string]bool {
		out := map[string]bool{}
		for s, err := range ds.Steps() {
			require.NoError(t, err)
			model := ""
			if s.ModelText != nil {
				model = *s.ModelText
			}
			if strings.Contains(strings.ToLower(s.ActionJSON+"\x00"+s.Output+"\x00"+model), text) {
				out[s.EpisodeID] = true
			}
		}
		return out
	}
	var first string
	for e, err := range ds.Episodes() {
		require.NoError(t, err)
		first = e.EpisodeID
		break
	}
	x := newIndex()
	for _, params := range []string{
		"", "task=grep-errors", "where=task_id!%3Dexport-bench&min_reward=1", "max_reward=0.5", "exit=done&drift=false&branch=false",
		"episode=" + first[:3], "text=WC -L", "text=ERROR&task=grep-errors,list-sources", "text=no such text",
	} {
		t.Run(params, func(t *testing.T) {
			q := parse(t, params+"&limit=1000")
			page, err := x.page(t.Context(), ds, "verify", q)
			require.NoError(t, err)
			var text map[string]bool
			if q.Text != "" {
				text = withText(strings.ToLower(q.Text))
			}
			want := []string{}
			require.NoError(t, inspect.EachEpisode(t.Context(), dir, q.Filter("verify"), func(e inspect.Entry) error {
				if text == nil || text[e.EpisodeID] {
					want = append(want, e.EpisodeID)
				}
				return nil
			}))
			slices.Sort(want)
			got := []string{}
			for _, r := range page.Episodes {
				got = append(got, r.EpisodeID)
			}
			assert.Equal(t, want, got)
			assert.Equal(t, len(want), page.Matched)
			assert.Equal(t, 240, page.Scanned)
		})
	}
	assert.Len(t, x.segs, gens, "one segment a shard")
	v := x.version
	_, err = x.page(t.Context(), ds, "verify", parse(t, "text=wc -l"))
	require.NoError(t, err)
	assert.Equal(t, v, x.version, "a dataset whose shards did not change is not read again")
	assert.LessOrEqual(t, len(x.texts), textCache)

	// Lists asked at once, text searches among them, on a fresh index
	// (run under -race), answer as one at a time does.
	y := newIndex()
	queries := []string{"text=grep -n", "task=fix-config", "text=cat config", "sort=duration_ms&desc=true", "text=grep -n&sort=reward"}
	type answer struct {
		page *Page
		err  error
	}
	answers := make([]answer, len(queries))
	var wg sync.WaitGroup
	for i, params := range queries {
		q := parse(t, params)
		wg.Go(func() {
			p, err := y.page(context.Background(), ds, "verify", q)
			answers[i] = answer{p, err}
		})
	}
	wg.Wait()
	for i, params := range queries {
		require.NoError(t, answers[i].err, params)
		alone, err := x.page(t.Context(), ds, "verify", parse(t, params))
		require.NoError(t, err)
		assert.Equal(t, alone, answers[i].page, params)
		assert.NotEmpty(t, alone.Episodes, params)
	}
}

func parse(t *testing.T, params string) Query {
	t.Helper()
	v := map[string][]string{}
	for kv := range strings.SplitSeq(params, "&") {
		if k, val, ok := strings.Cut(kv, "="); ok {
			val = strings.ReplaceAll(val, "%3D", "=")
			v[k] = append(v[k], val)
		}
	}
	q, err := ParseQuery(v)
	require.NoError(t, err)
	return q
}
