package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/export/loadertest"
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/testenv"
)

// cardFrontMatter reads README.md's YAML front matter with PyYAML (a
// parser other than ours) and returns it as JSON.
const cardFrontMatter = `
import json, sys, yaml
text = open(sys.argv[1]).read()
assert text.startswith("---\n"), "no front matter"
meta = yaml.safe_load(text[4:text.index("\n---\n", 4)])
print(json.dumps(meta))
`

// hubSizeCategories are the Hub's size_categories values (the Hub's
// dataset card metadata; datasets' size categories).
var hubSizeCategories = []string{"n<1K", "1K<n<10K", "10K<n<100K", "100K<n<1M", "1M<n<10M", "10M<n<100M",
	"100M<n<1B", "1B<n<10B", "10B<n<100B", "100B<n<1T", "n>1T"}

// An hf export is a Hub dataset repository as it stands: README.md's front
// matter (read by PyYAML) holds only documented card keys, its configs'
// data_files patterns claim every data file and nothing else is in the
// directory, the recorded splits and their num_examples are what
// datasets' loading finds (loadertest), size_categories is the Hub's
// bucket for the rows, and download_size is the files' bytes.
func TestHFExportIsPublishable(t *testing.T) {
	python := testenv.NeedValidators(t)
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	code, stdout, stderr := runBin(t, 5*time.Minute, "collect", "-tasks", "../../examples/tasks", "-repeats", "3", "-replicas", "2",
		"-out", run, "-workdir", filepath.Join(dir, "work"), "-quiet")
	require.Equal(t, cli.ExitOK, code, "%s%s", stdout, stderr)
	out := filepath.Join(dir, "hf")
	code, stdout, stderr = runBin(t, 5*time.Minute, "export", "-in", run, "-to", "hf", "-out", out, "-split", "train=0.5,test=0.5",
		"-license", "apache-2.0", "-quiet")
	require.Equal(t, cli.ExitOK, code, "%s%s", stdout, stderr)

	raw, err := exec.Command(python, "-c", cardFrontMatter, filepath.Join(out, "README.md")).Output()
	require.NoError(t, err)
	var meta struct {
		License        string   `json:"license"`
		SizeCategories []string `json:"size_categories"`
		Configs        []struct {
			ConfigName string `json:"config_name"`
			DataFiles  []struct {
				Split string `json:"split"`
				Path  string `json:"path"`
			} `json:"data_files"`
		} `json:"configs"`
		DatasetInfo struct {
			Features []json.RawMessage `json:"features"`
			Splits   []struct {
				Name        string `json:"name"`
				NumExamples int64  `json:"num_examples"`
			} `json:"splits"`
			DownloadSize int64 `json:"download_size"`
		} `json:"dataset_info"`
		Tags []string `json:"tags"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields() // only the keys above: every one a documented card key
	require.NoError(t, dec.Decode(&meta), string(raw))
	assert.Equal(t, "apache-2.0", meta.License)
	require.Len(t, meta.Configs, 1)
	assert.Equal(t, "default", meta.Configs[0].ConfigName)

	// Every file of the directory: the card, or claimed by one pattern.
	var files []string
	var bytes int64
	require.NoError(t, filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
		require.NoError(t, err)
		if !info.IsDir() {
			rel, _ := filepath.Rel(out, p)
			files = append(files, filepath.ToSlash(rel))
			if rel != "README.md" {
				bytes += info.Size()
			}
		}
		return nil
	}))
	claimed := map[string]string{}
	var splits []string
	for _, df := range meta.Configs[0].DataFiles {
		splits = append(splits, df.Split)
		for _, f := range files {
			if ok, _ := filepath.Match(df.Path, f); ok {
				require.NotContains(t, claimed, f, "two splits claim %s", f)
				claimed[f] = df.Split
			}
		}
	}
	for _, f := range files {
		if f != "README.md" {
			assert.Contains(t, claimed, f, "%s is uploaded but no config names it", f)
		}
	}
	assert.ElementsMatch(t, []string{"train", "test"}, splits)
	assert.Equal(t, bytes, meta.DatasetInfo.DownloadSize, "download_size is the data files' bytes")

	loaded, err := loadertest.LoadHF(out)
	require.NoError(t, err)
	var total int64
	for _, s := range meta.DatasetInfo.Splits {
		assert.Len(t, loaded[s.Name], int(s.NumExamples), "split %s", s.Name)
		total += s.NumExamples
	}
	assert.Equal(t, int64(3*3), total)
	require.Len(t, meta.SizeCategories, 1)
	assert.True(t, slices.Contains(hubSizeCategories, meta.SizeCategories[0]))
	assert.Equal(t, "n<1K", meta.SizeCategories[0])

	card, err := os.ReadFile(filepath.Join(out, "README.md"))
	require.NoError(t, err)
	assert.Contains(t, string(card), "huggingface-cli upload ORG/NAME path/to/this/directory . --repo-type dataset")
}
