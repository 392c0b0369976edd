package collect

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/forkline/forkline/manifest"
)

// Part selects the share of a run one machine collects: the episodes whose
// id hashes to Index modulo Count. Because episode ids are deterministic, n
// machines given Index 0..n-1 collect disjoint sets that together are the
// whole plan, with no coordination; Merge joins their datasets. The
// manifest's plan records it as a manifest.Part.
type Part manifest.Part

// Whole is the part that is the whole run.
var Whole = Part{Index: 0, Count: 1}

// Has reports whether the episode belongs to this part.
func (p Part) Has(episodeID string) bool {
	if p.Count <= 1 {
		return true
	}
	b, err := hex.DecodeString(episodeID[:16])
	if err != nil || len(b) < 8 {
		return false
	}
	return binary.BigEndian.Uint64(b)%uint64(p.Count) == uint64(p.Index)
}

func (p Part) String() string { return fmt.Sprintf("%d/%d", p.Index, p.Count) }

// ParsePart reads "i/n" (0 <= i < n).
func ParsePart(s string) (Part, error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return Part{}, fmt.Errorf("collect: shard %q: want i/n with 0 <= i < n, e.g. 0/4", s)
	}
	return Part{Index: i, Count: n}, nil
}

// PartFromEnv finds this machine's part in the environment of an array job,
// given the number of parts: JOB_COMPLETION_INDEX (a Kubernetes Indexed Job)
// or SLURM_ARRAY_TASK_ID (a Slurm job array, counted from
// SLURM_ARRAY_TASK_MIN, default 0). It fails when neither is set or the index
// is out of range, rather than silently collecting everything.
func PartFromEnv(count int, getenv func(string) string) (Part, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if count < 1 {
		return Part{}, fmt.Errorf("collect: shard count %d must be at least 1", count)
	}
	for _, v := range []string{"JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID"} {
		s := getenv(v)
		if s == "" {
			continue
		}
		i, err := strconv.Atoi(s)
		if err != nil {
			return Part{}, fmt.Errorf("collect: %s=%q is not an index", v, s)
		}
		if v == "SLURM_ARRAY_TASK_ID" {
			if m := getenv("SLURM_ARRAY_TASK_MIN"); m != "" {
				if min, err := strconv.Atoi(m); err == nil {
					i -= min
				}
			}
		}
		if i < 0 || i >= count {
			return Part{}, fmt.Errorf("collect: %s gives part %d, outside 0..%d (%d parts)", v, i, count-1, count)
		}
		return Part{Index: i, Count: count}, nil
	}
	return Part{}, fmt.Errorf("collect: %d parts need JOB_COMPLETION_INDEX (Kubernetes Indexed Job) or SLURM_ARRAY_TASK_ID (Slurm array) in the environment to say which part this is", count)
}
