package shard

import (
	"bufio"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}

// TestSchemaDocManifest keeps the manifest section of docs/SCHEMA.md in step
// with Manifest and ShardInfo.
func TestSchemaDocManifest(t *testing.T) {
	f, err := os.Open("../../docs/SCHEMA.md")
	require.NoError(t, err)
	defer f.Close()
	var manifest, shards []string
	in, target := false, &manifest
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in, target = line == "## Manifest", &manifest
			continue
		}
		if !in {
			continue
		}
		if strings.HasPrefix(line, "Each `shards` entry") {
			target = &shards
		}
		if strings.HasPrefix(line, "| `") {
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
			*target = append(*target, name)
		}
	}
	require.NoError(t, sc.Err())
	want := jsonFields(reflect.TypeFor[Manifest]())
	slices.Sort(want)
	slices.Sort(manifest)
	assert.Equal(t, want, manifest, "manifest fields documented in docs/SCHEMA.md")
	want = jsonFields(reflect.TypeFor[ShardInfo]())
	slices.Sort(want)
	slices.Sort(shards)
	assert.Equal(t, want, shards, "shard entry fields documented in docs/SCHEMA.md")
}
