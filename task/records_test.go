package task

import (
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
