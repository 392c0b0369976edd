package task

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRecordsRoundTripAndRefuseTampering(t *testing.T) {
	specs, err := Parse("good.yaml", []byte(good))
	require.NoError(t, err)
	raw, err := EncodeRecords(specs)
	require.NoError(t, err)
	got, err := DecodeRecords(raw)
	require.NoError(t, err)
	require.Equal(t, specs[0].Hash(), got["fix-greeting"].Hash(), "a recorded spec hashes as the original")
	hashes, err := RecordHashes(raw)
	require.NoError(t, err)
	require.Equal(t, specs[0].Hash(), hashes["fix-greeting"])

	tampered := strings.Replace(string(raw), "echo helo", "echo hello", 1)
	_, err = DecodeRecords([]byte(tampered))
	require.ErrorContains(t, err, "fix-greeting hashes to")
}

// A tasks directory's subdirectories of task files are not read (Load is
// not recursive); NotRead names them, so that a caller says so.
func TestNotReadNamesSubdirectoriesOfTaskFiles(t *testing.T) {
	require.Equal(t, []string{filepath.Join("..", "examples", "tasks", "web")}, NotRead(filepath.Join("..", "examples", "tasks")))
	require.Empty(t, NotRead(filepath.Join("..", "examples", "tasks", "web")))
	require.Empty(t, NotRead(filepath.Join("..", "examples", "tasks", "fix-sum.yaml")))
}
