package shard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forkline/forkline/schemas"
)

// ManifestFile is the manifest's file name inside a dataset directory.
const ManifestFile = "manifest.json"

// ToolName is the Manifest.Tool value forkline writes.
const ToolName = "forkline"

// Status is the state of a run as its manifest records it.
type Status string

// The statuses.
const (
	StatusRunning  Status = "running"  // a Writer has the run open, or crashed
	StatusPartial  Status = "partial"  // stopped before every planned episode ran
	StatusComplete Status = "complete" // every planned episode is committed
)

// ShardInfo describes one closed shard file.
type ShardInfo struct {
	File       string `json:"file"` // relative to the dataset, slash-separated: "steps/part-00003.parquet"
	Table      string `json:"table"`
	Generation int    `json:"generation"`
	Rows       int64  `json:"rows"`
	Bytes      int64  `json:"bytes"`
	SHA256     string `json:"sha256"` // hex
}

// Manifest is the content of manifest.json. The writer owns SchemaVersion,
// RunID, Status, CreatedAt, UpdatedAt, TasksFile, Shards and Counts; the
// collector owns the rest, which this package stores as given.
type Manifest struct {
	SchemaVersion int       `json:"schema_version"`
	Tool          string    `json:"tool"`
	ToolVersion   string    `json:"tool_version"`
	RunID         string    `json:"run_id"`
	Status        Status    `json:"status"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`

	Provider json.RawMessage `json:"provider,omitempty"`
	Policy   json.RawMessage `json:"policy,omitempty"`
	Capture  json.RawMessage `json:"capture,omitempty"`
	Tasks    json.RawMessage `json:"tasks,omitempty"`
	Plan     json.RawMessage `json:"plan,omitempty"`
	Summary  json.RawMessage `json:"summary,omitempty"`

	// TasksFile names the sidecar file that holds Tasks when they are
	// longer than TasksInlineMax (the manifest then holds no "tasks"). The
	// writer owns it; readers load the sidecar into Tasks, verified, so
	// Tasks reads the same either way.
	TasksFile *SidecarInfo `json:"tasks_file,omitempty"`

	Shards []ShardInfo      `json:"shards"`
	Counts map[string]int64 `json:"counts"` // rows per table over the listed shards
}

// Clone returns a deep copy of m.
func (m Manifest) Clone() Manifest {
	c := m
	c.Provider = bytes.Clone(m.Provider)
	c.Policy = bytes.Clone(m.Policy)
	c.Capture = bytes.Clone(m.Capture)
	c.Tasks = bytes.Clone(m.Tasks)
	c.Plan = bytes.Clone(m.Plan)
	c.Summary = bytes.Clone(m.Summary)
	if m.TasksFile != nil {
		tf := *m.TasksFile
		c.TasksFile = &tf
	}
	c.Shards = slices.Clone(m.Shards)
	c.Counts = maps.Clone(m.Counts)
	return c
}

// withShards returns a copy of m that shares m's opaque fields (which
// nobody mutates in place: the Writer copies them on the way in and out)
// and owns its Shards and Counts: what a generation close changes. Unlike
// Clone it does not copy Tasks, which may be tens of megabytes.
func (m Manifest) withShards() Manifest {
	c := m
	c.Shards = slices.Clone(m.Shards)
	c.Counts = maps.Clone(m.Counts)
	return c
}

// Generations returns the generation numbers that have shards, ascending.
func (m Manifest) Generations() []int {
	var gens []int
	for _, s := range m.Shards {
		gens = append(gens, s.Generation)
	}
	slices.Sort(gens)
	return slices.Compact(gens)
}

// readManifest reads dir's manifest and the tasks sidecar it names (see
// TasksInlineMax), so that the Manifest's Tasks read the same whether they
// were stored inline or not.
func readManifest(dir string) (Manifest, error) {
	name := filepath.Join(dir, ManifestFile)
	data, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, fmt.Errorf("%w: %s has no %s", ErrNoDataset, dir, ManifestFile)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("shard: read manifest: %w", err)
	}
	m, err := decodeManifest(name, data)
	if err != nil {
		return Manifest{}, err
	}
	if m.TasksFile != nil {
		if m.Tasks, err = readSidecar(dir, *m.TasksFile); err != nil {
			return Manifest{}, err
		}
	}
	return m, nil
}

// decodeManifest decodes the bytes of a manifest file (name is for
// messages) and checks what can be checked without the dataset's other
// files: the schema version (ErrSchemaVersion), that a tasks sidecar
// reference is well-formed, and that its bookkeeping holds together
// (checkManifest, ErrCorrupt). It does not read the sidecar: Tasks stays
// empty when the manifest names one.
func decodeManifest(name string, data []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: %s", ErrCorrupt, name, jsonError(data, err))
	}
	if !schemas.Readable(m.SchemaVersion) {
		return Manifest{}, fmt.Errorf("%w: %s was written with schema version %d; this build of forkline reads versions %s",
			ErrSchemaVersion, name, m.SchemaVersion, readableVersions())
	}
	if m.TasksFile != nil {
		if len(m.Tasks) > 0 {
			return Manifest{}, fmt.Errorf("%w: %s has both tasks and tasks_file", ErrCorrupt, name)
		}
		if err := m.TasksFile.check(); err != nil {
			return Manifest{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
		}
	}
	if m.Counts == nil {
		m.Counts = map[string]int64{}
	}
	if err := checkManifest(m); err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	}
	return m, nil
}

// writeManifest replaces dir's manifest atomically: temporary file, fsync,
// rename, fsync of the directory. Tasks longer than TasksInlineMax go to
// their sidecar first (written once: side remembers the last one written
// and is updated; it may be nil). It returns the manifest's size in bytes.
func writeManifest(dir string, m Manifest, side *tasksSidecar) (int, error) {
	disk := m
	disk.TasksFile = nil
	var wrote *SidecarInfo
	if len(m.Tasks) > TasksInlineMax {
		info, err := side.ensure(dir, m.Tasks)
		if err != nil {
			return 0, err
		}
		disk.Tasks, disk.TasksFile, wrote = nil, &info, &info
	}
	data, err := json.MarshalIndent(disk, "", "  ")
	if err != nil {
		return 0, fmt.Errorf("shard: encode manifest: %w", err)
	}
	data = append(data, '\n')
	final := filepath.Join(dir, ManifestFile)
	tmp := final + ".tmp"
	if err := writeFileSync(tmp, data); err != nil {
		return 0, fmt.Errorf("shard: write manifest: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return 0, fmt.Errorf("shard: write manifest: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return 0, fmt.Errorf("shard: write manifest: %w", err)
	}
	side.referenced(dir, wrote, m.Tasks)
	return len(data), nil
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir fsyncs a directory so that renames and removals in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// readableVersions lists schemas.ReadableVersions for messages.
func readableVersions() string {
	parts := make([]string, len(schemas.ReadableVersions))
	for i, v := range schemas.ReadableVersions {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, " and ")
}
