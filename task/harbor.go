package task

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/forkline/forkline/runtime"
)

// A Harbor task folder, as Harbor's documentation describes it (and
// Terminal-Bench 2, Harbor's adapters and NeMo Gym write it):
//
//	task.toml        settings, schema_version up to 1.4
//	instruction.md   the agent's instruction
//	environment/     a Dockerfile and its context (or docker_image in task.toml)
//	tests/test.sh    the verifier, with its fixtures beside it
//	solution/solve.sh  the oracle (what -policy script runs)
//
// The folder's name is the task's id. Every key of task.toml is read or
// refused, naming the file, line and key: nothing is silently ignored.

// HarborSchemaVersions are the task.toml schema versions this loader reads.
var HarborSchemaVersions = []string{"1.0", "1.1", "1.2", "1.3", "1.4"}

// Harbor's defaults, applied where task.toml gives no value.
const (
	// HarborVerifierTimeout is Harbor's [verifier] timeout_sec default.
	HarborVerifierTimeout = 600 * time.Second
	// HarborMaxSteps bounds a Harbor task's episodes in steps. Harbor
	// bounds an episode by [agent] timeout_sec alone; forkline needs a step
	// bound too (a policy looping on instant actions), and a generous one
	// leaves the timeout the real bound, as in Harbor.
	HarborMaxSteps = 1000
)

// The paths Harbor's contract fixes inside the sandbox.
const (
	HarborTestsDir    = "/tests"
	HarborSolutionDir = "/solution"
	HarborTestCommand = "bash /tests/test.sh"
)

// IsHarborFolder reports whether dir is a Harbor task folder (it holds a
// task.toml).
func IsHarborFolder(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "task.toml"))
	return err == nil && st.Mode().IsRegular()
}

// LoadHarbor reads the Harbor task folder dir.
func LoadHarbor(dir string) (Spec, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Spec{}, fmt.Errorf("task: %w", err)
	}
	c, err := openConfined(abs, dir)
	if err != nil {
		return Spec{}, fmt.Errorf("task: %w", err)
	}
	defer c.Close()
	h := harborLoader{dir: abs, file: filepath.Join(dir, "task.toml"), show: dir, c: c}
	return h.load()
}

type harborLoader struct {
	dir  string // absolute
	show string // the folder as the user named it, for messages
	file string // task.toml, as shown
	pos  map[string]unstable.Position
	// c reads the folder's files, never outside it (see confined).
	c *confined

	buildTimeout time.Duration     // [environment] build_timeout_sec
	solutionEnv  map[string]string // [solution] env
}

// errAt is an error about key (dotted, e.g. "environment.gpus") of task.toml.
func (h *harborLoader) errAt(key, format string, args ...any) error {
	e := &SpecError{File: h.file, Field: key, Msg: fmt.Sprintf(format, args...)}
	if p, ok := h.pos[key]; ok {
		e.Line, e.Col = p.Line, p.Column
	}
	return e
}

// errFile is an error about a file of the folder other than task.toml.
func (h *harborLoader) errFile(rel, format string, args ...any) error {
	return &SpecError{File: filepath.Join(h.show, rel), Msg: fmt.Sprintf(format, args...)}
}

// The keys task.toml may hold, by table. Harbor itself ignores keys it
// does not know; forkline refuses them, so a setting never silently does
// nothing.
var harborKeys = map[string][]string{
	"":            {"schema_version", "version", "task", "metadata", "verifier", "agent", "environment", "solution", "source", "artifacts"},
	"task":        {"name", "description", "authors", "keywords"},
	"verifier":    {"timeout_sec", "env", "user", "network_mode", "environment_mode", "environment", "collect"},
	"agent":       {"timeout_sec", "user", "network_mode", "allowed_hosts"},
	"environment": {"build_timeout_sec", "docker_image", "cpus", "memory_mb", "storage_mb", "gpus", "gpu_types", "network_mode", "allowed_hosts", "allow_internet", "mcp_servers", "env", "os", "skills_dir", "memory", "storage", "tpu"},
	"solution":    {"env"},
}

func (h *harborLoader) load() (Spec, error) {
	id := filepath.Base(h.dir)
	if !idRE.MatchString(id) {
		return Spec{}, &SpecError{File: h.show, Msg: fmt.Sprintf("the folder name %q is the task's id and must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", id)}
	}
	data, _, err := h.c.readFile("task.toml", MaxFileBytes)
	if err != nil {
		return Spec{}, &SpecError{File: h.file, Msg: h.c.explain("task.toml", err)}
	}
	doc, err := h.parse(data)
	if err != nil {
		return Spec{}, err
	}
	s := Spec{ID: id, Source: h.file, Harbor: &Harbor{SchemaVersion: "1.0"}}
	if err := h.checkKeys(doc, ""); err != nil {
		return Spec{}, err
	}
	if err := h.schema(doc, s.Harbor); err != nil {
		return Spec{}, err
	}
	meta := map[string]any{}
	if err := h.metadata(doc, meta); err != nil {
		return Spec{}, err
	}
	env, err := h.table(doc, "environment")
	if err != nil {
		return Spec{}, err
	}
	if err := h.environment(env, &s); err != nil {
		return Spec{}, err
	}
	if err := h.phases(doc, &s); err != nil {
		return Spec{}, err
	}
	if err := h.refuseUnsupported(doc); err != nil {
		return Spec{}, err
	}
	if err := h.folder(&s); err != nil {
		return Spec{}, err
	}
	if len(meta) > 0 {
		if s.Metadata, err = CanonicalMetadata(meta); err != nil {
			return Spec{}, h.errAt("metadata", "%s", strings.TrimPrefix(err.Error(), "task: "))
		}
	}
	if s.Harbor.Digest, err = DigestTree(h.dir); err != nil {
		return Spec{}, &SpecError{File: h.show, Msg: strings.TrimPrefix(err.Error(), "task: ")}
	}
	return s, nil
}

// parse decodes task.toml and indexes where each key is written.
func (h *harborLoader) parse(data []byte) (map[string]any, error) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, col := de.Position()
			return nil, &SpecError{File: h.file, Line: line, Col: col, Msg: strings.TrimPrefix(de.Error(), "toml: ")}
		}
		return nil, &SpecError{File: h.file, Msg: err.Error()}
	}
	h.pos = tomlPositions(data)
	return doc, nil
}

// tomlPositions maps every key of a TOML document (dotted, tables
// included) to where it is first written.
func tomlPositions(data []byte) map[string]unstable.Position {
	out := map[string]unstable.Position{}
	var p unstable.Parser
	p.Reset(data)
	keyOf := func(it unstable.Iterator) (string, unstable.Position) {
		var parts []string
		var at unstable.Position
		for it.Next() {
			n := it.Node()
			if len(parts) == 0 {
				at = p.Shape(n.Raw).Start
			}
			parts = append(parts, string(n.Data))
		}
		return strings.Join(parts, "."), at
	}
	record := func(key string, at unstable.Position) {
		if _, ok := out[key]; !ok {
			out[key] = at
		}
	}
	var inline func(prefix string, n *unstable.Node)
	inline = func(prefix string, n *unstable.Node) {
		it := n.Children()
		for it.Next() {
			kv := it.Node()
			if kv.Kind != unstable.KeyValue {
				continue
			}
			k, at := keyOf(kv.Key())
			full := joinKey(prefix, k)
			record(full, at)
			if v := kv.Value(); v.Kind == unstable.InlineTable {
				inline(full, v)
			}
		}
	}
	table := ""
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			k, at := keyOf(e.Key())
			table = k
			record(k, at)
		case unstable.KeyValue:
			k, at := keyOf(e.Key())
			full := joinKey(table, k)
			record(full, at)
			if v := e.Value(); v.Kind == unstable.InlineTable {
				inline(full, v)
			}
		}
	}
	return out
}

func joinKey(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

// checkKeys refuses keys task.toml may not hold, at the top level and in
// the tables whose keys are fixed; it lists the known ones.
func (h *harborLoader) checkKeys(doc map[string]any, at string) error {
	known := harborKeys[at]
	for _, k := range slices.Sorted(mapKeys(doc)) {
		full := joinKey(at, k)
		if !slices.Contains(known, k) {
			sorted := slices.Clone(known)
			sort.Strings(sorted)
			return h.errAt(full, "unknown key (known: %s)", strings.Join(sorted, ", "))
		}
		if _, fixed := harborKeys[full]; fixed && at == "" {
			sub, ok := doc[k].(map[string]any)
			if !ok {
				return h.errAt(full, "must be a table, not %s", tomlKind(doc[k]))
			}
			if err := h.checkKeys(sub, full); err != nil {
				return err
			}
		}
	}
	return nil
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func tomlKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a table"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	}
	return fmt.Sprintf("%T", v)
}

// table returns the table at key of doc, empty when absent.
func (h *harborLoader) table(doc map[string]any, key string) (map[string]any, error) {
	v, ok := doc[key]
	if !ok {
		return map[string]any{}, nil
	}
	t, ok := v.(map[string]any)
	if !ok {
		return nil, h.errAt(key, "must be a table, not %s", tomlKind(v))
	}
	return t, nil
}

// schema reads schema_version, or its old spelling version.
func (h *harborLoader) schema(doc map[string]any, hb *Harbor) error {
	key := "schema_version"
	v, ok := doc[key]
	if old, has := doc["version"]; has {
		if ok {
			return h.errAt("version", "both version (its old spelling) and schema_version are given; keep schema_version")
		}
		key, v, ok = "version", old, true
	}
	if !ok {
		return nil
	}
	s, isStr := v.(string)
	if !isStr {
		return h.errAt(key, "must be a string such as \"1.4\", not %s", tomlKind(v))
	}
	if !slices.Contains(HarborSchemaVersions, s) {
		return h.errAt(key, "schema %q is not one this version of forkline reads (known: %s)", s, strings.Join(HarborSchemaVersions, ", "))
	}
	hb.SchemaVersion = s
	return nil
}

// metadata gathers [metadata] (free-form), [task] and source into meta:
// they describe the task and are kept with it, never acted on.
func (h *harborLoader) metadata(doc map[string]any, meta map[string]any) error {
	if v, ok := doc["metadata"]; ok {
		m, ok := v.(map[string]any)
		if !ok {
			return h.errAt("metadata", "must be a table, not %s", tomlKind(v))
		}
		for k, x := range m {
			meta[k] = x
		}
	}
	for _, key := range []string{"task", "source"} {
		v, ok := doc[key]
		if !ok {
			continue
		}
		if _, taken := meta[key]; taken {
			return h.errAt("metadata."+key, "[metadata] holds a key %q, which the %s key of task.toml is kept under too", key, key)
		}
		if key == "source" {
			if _, ok := v.(string); !ok {
				return h.errAt(key, "must be a string, not %s", tomlKind(v))
			}
		}
		meta[key] = v
	}
	return nil
}

// harborNetworks maps Harbor's network modes to provider network modes.
// "public" is the engine's default bridge; a provider without one (an
// engine started with --bridge=none) refuses it before anything runs.
var harborNetworks = map[string]string{"no-network": NetworkNone, "public": "bridge"}

// environment reads [environment]: the image, resources, network and
// environment variables.
func (h *harborLoader) environment(env map[string]any, s *Spec) error {
	const at = "environment."
	if v, ok := env["docker_image"]; ok {
		img, err := h.str(at+"docker_image", v)
		if err != nil {
			return err
		}
		if img == "" || strings.ContainsRune(img, 0) {
			return h.errAt(at+"docker_image", "%q is not an image name", img)
		}
		s.Image = img
	}
	if v, ok := env["cpus"]; ok {
		f, err := h.number(at+"cpus", v)
		if err != nil {
			return err
		}
		if f < MinCPUs || f > MaxCPUs {
			return h.errAt(at+"cpus", "%v is out of range (%g to %d cores)", f, MinCPUs, MaxCPUs)
		}
		s.Limits.CPUs = f
	}
	memKey, memMB, err := h.size(env, "memory_mb", "memory")
	if err != nil {
		return err
	}
	if memKey != "" {
		if memMB < MinMemoryMB || memMB > MaxMemoryMB {
			return h.errAt(at+memKey, "%d MB is out of range (%d to %d MB)", memMB, MinMemoryMB, MaxMemoryMB)
		}
		s.Limits.MemoryMB = memMB
	}
	storeKey, storeMB, err := h.size(env, "storage_mb", "storage")
	if err != nil {
		return err
	}
	if storeKey != "" {
		if storeMB < 0 || storeMB > MaxMemoryMB {
			return h.errAt(at+storeKey, "%d MB is out of range (0 to %d MB)", storeMB, MaxMemoryMB)
		}
		s.Limits.StorageMB = storeMB
	}
	if v, ok := env["gpus"]; ok {
		n, err := h.integer(at+"gpus", v)
		if err != nil {
			return err
		}
		if n != 0 {
			return h.errAt(at+"gpus", "%d GPUs asked for: forkline's sandboxes have no GPUs", n)
		}
	}
	if v, ok := env["gpu_types"]; ok {
		// Acceptable GPU types matter only with gpus > 0, refused above.
		if _, ok := v.([]any); !ok {
			return h.errAt(at+"gpu_types", "must be an array of strings, not %s", tomlKind(v))
		}
	}
	if v, ok := env["tpu"]; ok {
		return h.errAt(at+"tpu", "a TPU (%v) asked for: forkline's sandboxes have none", v)
	}
	if v, ok := env["os"]; ok {
		o, err := h.str(at+"os", v)
		if err != nil {
			return err
		}
		if o != "linux" {
			return h.errAt(at+"os", "%q: forkline's sandboxes run Linux only", o)
		}
	}
	if v, ok := env["mcp_servers"]; ok {
		if list, isList := v.([]any); !isList || len(list) > 0 {
			return h.errAt(at+"mcp_servers", "MCP servers for the agent are not supported: forkline's policies act through its own actions")
		}
	}
	if v, ok := env["skills_dir"]; ok {
		return h.errAt(at+"skills_dir", "%v: agent skills are not supported: forkline installs no agent harness", v)
	}
	if v, ok := env["allowed_hosts"]; ok {
		if list, isList := v.([]any); !isList || len(list) > 0 {
			return h.errAt(at+"allowed_hosts", "host allowlists are not supported: a sandbox has no network or the engine's")
		}
	}
	if v, ok := env["build_timeout_sec"]; ok {
		d, err := h.seconds(at+"build_timeout_sec", v)
		if err != nil {
			return err
		}
		h.buildTimeout = d
	}
	mode, err := h.baseNetwork(env)
	if err != nil {
		return err
	}
	if mode != "" {
		s.Network = &Network{Episode: mode}
	}
	if v, ok := env["env"]; ok {
		if s.Env, err = h.envTable(at+"env", v, true); err != nil {
			return err
		}
	}
	return nil
}

// size reads a size in MB from key, or from its old spelling (a string
// such as "2G" or "512M"); it returns the key it read ("" for neither).
func (h *harborLoader) size(env map[string]any, key, old string) (string, int64, error) {
	const at = "environment."
	v, ok := env[key]
	ov, hasOld := env[old]
	switch {
	case ok && hasOld:
		return "", 0, h.errAt(at+old, "both %s (its old spelling) and %s are given; keep %s", old, key, key)
	case ok:
		n, err := h.integer(at+key, v)
		return key, n, err
	case hasOld:
		str, err := h.str(at+old, ov)
		if err != nil {
			return "", 0, err
		}
		n, err := parseSizeMB(str)
		if err != nil {
			return "", 0, h.errAt(at+old, "%s", err)
		}
		return old, n, nil
	}
	return "", 0, nil
}

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([KMGkmg])$`)

// parseSizeMB reads a size as Harbor's old memory and storage keys write
// it ("2G", "512M", "1024K") in whole MB.
func parseSizeMB(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size such as 2G or 512M", s)
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size such as 2G or 512M", s)
	}
	switch strings.ToUpper(m[2]) {
	case "G":
		f *= 1024
	case "K":
		f /= 1024
	}
	if f > float64(MaxMemoryMB) {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return int64(f), nil
}

// baseNetwork reads [environment] network_mode, or its old spelling
// allow_internet, as a provider network mode ("" when neither is given:
// the provider's default, none).
func (h *harborLoader) baseNetwork(env map[string]any) (string, error) {
	const at = "environment."
	v, ok := env["network_mode"]
	ai, hasOld := env["allow_internet"]
	if ok && hasOld {
		return "", h.errAt(at+"allow_internet", "both allow_internet (the old spelling) and network_mode are given; keep network_mode")
	}
	if hasOld {
		b, isBool := ai.(bool)
		if !isBool {
			return "", h.errAt(at+"allow_internet", "must be true or false, not %s", tomlKind(ai))
		}
		if b {
			return harborNetworks["public"], nil
		}
		return NetworkNone, nil
	}
	if !ok {
		return "", nil
	}
	return h.networkMode(at+"network_mode", v)
}

func (h *harborLoader) networkMode(key string, v any) (string, error) {
	m, err := h.str(key, v)
	if err != nil {
		return "", err
	}
	if mode, ok := harborNetworks[m]; ok {
		return mode, nil
	}
	if m == "allowlist" {
		return "", h.errAt(key, "allowlist: host allowlists are not supported (known: no-network, public)")
	}
	return "", h.errAt(key, "%q is not a network mode (known: no-network, public)", m)
}

// phases reads [agent], [verifier] and [solution].
func (h *harborLoader) phases(doc map[string]any, s *Spec) error {
	agent, err := h.table(doc, "agent")
	if err != nil {
		return err
	}
	verifier, err := h.table(doc, "verifier")
	if err != nil {
		return err
	}
	solution, err := h.table(doc, "solution")
	if err != nil {
		return err
	}
	s.Limits.MaxSteps = HarborMaxSteps
	if v, ok := agent["timeout_sec"]; ok {
		d, err := h.seconds("agent.timeout_sec", v)
		if err != nil {
			return err
		}
		s.Limits.EpisodeTimeout = Duration(d)
	}
	// Harbor bounds the agent's commands by its timeout only, so a command
	// (solve.sh is one) may take the whole episode.
	s.Limits.ActionTimeout = s.Limits.EpisodeTimeout
	if s.Limits.ActionTimeout == 0 {
		s.Limits.ActionTimeout = Duration(DefaultEpisodeTimeout)
	}
	for _, t := range []struct {
		name  string
		table map[string]any
	}{{"agent", agent}, {"verifier", verifier}} {
		if v, ok := t.table["user"]; ok {
			if err := h.user(t.name+".user", v); err != nil {
				return err
			}
		}
		if v, ok := t.table["network_mode"]; ok {
			mode, err := h.networkMode(t.name+".network_mode", v)
			if err != nil {
				return err
			}
			base := NetworkNone
			if s.Network != nil {
				base = s.Network.Episode
			}
			if mode != base {
				return h.errAt(t.name+".network_mode", "the %s's network differs from the environment's (%s): forkline fixes a sandbox's network when it starts and cannot switch it between phases", t.name, base)
			}
		}
	}
	if v, ok := agent["allowed_hosts"]; ok {
		if list, isList := v.([]any); !isList || len(list) > 0 {
			return h.errAt("agent.allowed_hosts", "host allowlists are not supported: a sandbox has no network or the engine's")
		}
	}
	ver := &Verify{Cmd: HarborTestCommand, Reward: RewardHarbor, TimeoutMS: HarborVerifierTimeout.Milliseconds(),
		Dir: HarborTestsDir, Clear: []string{HarborTestsDir, HarborRewardDir}}
	if v, ok := verifier["timeout_sec"]; ok {
		d, err := h.seconds("verifier.timeout_sec", v)
		if err != nil {
			return err
		}
		ver.TimeoutMS = d.Milliseconds()
	}
	if v, ok := verifier["env"]; ok {
		if ver.Env, err = h.envTable("verifier.env", v, true); err != nil {
			return err
		}
	}
	if v, ok := verifier["environment_mode"]; ok {
		m, err := h.str("verifier.environment_mode", v)
		if err != nil {
			return err
		}
		if m != "shared" {
			return h.errAt("verifier.environment_mode", "%q: a separate verifier environment is not supported; the verifier runs in the episode's sandbox (shared)", m)
		}
	}
	if _, ok := verifier["environment"]; ok {
		return h.errAt("verifier.environment", "a separate verifier environment is not supported; the verifier runs in the episode's sandbox (shared)")
	}
	if v, ok := verifier["collect"]; ok {
		if list, isList := v.([]any); !isList || len(list) > 0 {
			return h.errAt("verifier.collect", "collect hooks are not supported")
		}
	}
	s.Verify = ver
	if v, ok := solution["env"]; ok {
		if h.solutionEnv, err = h.envTable("solution.env", v, false); err != nil {
			return err
		}
	}
	return nil
}

// user accepts root (by name or uid 0) or nothing: forkline runs every
// command as the image's user, and Harbor runs its verifier as root.
func (h *harborLoader) user(key string, v any) error {
	switch u := v.(type) {
	case string:
		if u == "root" || u == "0" {
			return nil
		}
	case int64:
		if u == 0 {
			return nil
		}
	}
	return h.errAt(key, "%v: running commands as another user is not supported; leave it out to run as the image's user", v)
}

// refuseUnsupported refuses top-level settings that have no forkline
// meaning yet.
func (h *harborLoader) refuseUnsupported(doc map[string]any) error {
	if v, ok := doc["artifacts"]; ok {
		if list, isList := v.([]any); !isList || len(list) > 0 {
			return h.errAt("artifacts", "artifacts are not supported: a dataset keeps every step's observations instead")
		}
	}
	return nil
}

// envTable reads a table of environment variables. refs allows values that
// are ${NAME} or ${NAME:-default} references to forkline's environment,
// resolved when the sandbox or verifier starts and never recorded.
func (h *harborLoader) envTable(key string, v any, refs bool) (map[string]string, error) {
	t, ok := v.(map[string]any)
	if !ok {
		return nil, h.errAt(key, "must be a table of NAME = \"value\", not %s", tomlKind(v))
	}
	out := map[string]string{}
	total := 0
	for _, k := range slices.Sorted(mapKeys(t)) {
		field := key + "." + k
		val, ok := t[k].(string)
		if !ok {
			return nil, h.errAt(field, "must be a string, not %s", tomlKind(t[k]))
		}
		switch {
		case !envNameRE.MatchString(k):
			return nil, h.errAt(field, "%q is not an environment variable name (letters, digits, _; not starting with a digit)", k)
		case strings.ContainsRune(val, 0):
			return nil, h.errAt(field, "holds a NUL byte, which no environment can carry")
		case len(k)+1+len(val) > MaxArgBytes:
			return nil, h.errAt(field, "NAME=value is %d bytes; at most %d", len(k)+1+len(val), MaxArgBytes)
		case !refs && envRefRE.MatchString(val):
			return nil, h.errAt(field, "%s: a reference to forkline's environment cannot be given here: the solution's commands are recorded in the dataset", val)
		}
		total += len(k) + len(val) + 2
		out[k] = val
	}
	if total > MaxEnvBytes {
		return nil, h.errAt(key, "the environment is %d bytes; at most %d", total, MaxEnvBytes)
	}
	return out, nil
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (h *harborLoader) str(key string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", h.errAt(key, "must be a string, not %s", tomlKind(v))
	}
	if !utf8.ValidString(s) {
		return "", h.errAt(key, "%s", errNotUTF8)
	}
	return s, nil
}

func (h *harborLoader) number(key string, v any) (float64, error) {
	switch n := v.(type) {
	case int64:
		return float64(n), nil
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return 0, h.errAt(key, "%v is not a finite number", n)
		}
		return n, nil
	}
	return 0, h.errAt(key, "must be a number, not %s", tomlKind(v))
}

func (h *harborLoader) integer(key string, v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), nil
		}
	}
	return 0, h.errAt(key, "must be a whole number, not %v", v)
}

// seconds reads a timeout in seconds into a duration in forkline's range.
func (h *harborLoader) seconds(key string, v any) (time.Duration, error) {
	f, err := h.number(key, v)
	if err != nil {
		return 0, err
	}
	d := time.Duration(f * float64(time.Second))
	if f <= 0 || d < MinTimeout || d > MaxTimeout {
		return 0, h.errAt(key, "%v seconds is out of range (%s)", f, timeoutRange)
	}
	return d, nil
}

// folder reads the folder's files: instruction.md, environment/, tests/,
// solution/.
func (h *harborLoader) folder(s *Spec) error {
	instr, _, err := h.c.readFile("instruction.md", MaxFileBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, out := h.c.escapes("instruction.md"); !out {
			return h.errFile("instruction.md", "missing: a Harbor task's instruction (%v)", errors.Unwrap(err))
		}
		return h.errFile("instruction.md", "%s", h.c.explain("instruction.md", err))
	case errors.Is(err, errTooLarge):
		return h.errFile("instruction.md", "is more than %d bytes (a dataset records its tasks)", MaxFileBytes)
	case err != nil:
		return h.errFile("instruction.md", "%s", h.c.explain("instruction.md", err))
	}
	if !utf8.Valid(instr) {
		return h.errFile("instruction.md", "%s", errNotUTF8)
	}
	if strings.TrimSpace(string(instr)) == "" {
		return h.errFile("instruction.md", "is empty: tell the agent what to do")
	}
	s.Instruction = string(instr)
	if st, err := h.c.stat("steps"); err == nil && st.IsDir() {
		return h.errFile("steps", "multi-step tasks (a steps/ folder) are not supported yet")
	}
	if err := h.environmentDir(s); err != nil {
		return err
	}
	if err := h.tests(s.Verify); err != nil {
		return err
	}
	return h.solution(s)
}

// environmentDir decides where the image comes from: docker_image (pulled,
// as Harbor does when a task declares one), else environment/Dockerfile
// (built with environment/ as its context).
func (h *harborLoader) environmentDir(s *Spec) error {
	envDir := filepath.Join(h.dir, "environment")
	if st, err := h.c.lstat("environment"); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		// The build context is sent as it is on disk, its symlinks as
		// links: the folder itself must be the context.
		return h.errFile("environment", "is a symlink: the build context must be a folder of the task itself")
	}
	if name := h.composeFile(); name != "" {
		if err := h.compose(s, name); err != nil {
			return err
		}
	}
	if s.Image != "" {
		return nil
	}
	if st, err := h.c.stat("environment/" + DefaultDockerfile); err != nil || !st.Mode().IsRegular() {
		if _, out := h.c.escapes("environment/" + DefaultDockerfile); out {
			return h.errFile("environment", "%s", h.c.explain("environment/"+DefaultDockerfile, err))
		}
		return h.errFile("environment", "no environment/Dockerfile and no [environment] docker_image in task.toml: the task has no image")
	}
	if msg := checkDockerfile(envDir, ""); msg != "" {
		return h.errFile("environment", "%s", msg)
	}
	digest, err := DigestTree(envDir)
	if err != nil {
		return h.errFile("environment", "%s", strings.TrimPrefix(err.Error(), "task: "))
	}
	s.Build = &Build{Context: envDir, ContextDigest: digest, Timeout: Duration(h.buildTimeout)}
	return nil
}

// tests reads tests/ (test.sh and its fixtures) as the hidden verifier
// files, placed under /tests after the episode.
func (h *harborLoader) tests(v *Verify) error {
	if st, err := h.c.stat("tests/test.sh"); err != nil || !st.Mode().IsRegular() {
		if _, out := h.c.escapes("tests/test.sh"); out {
			return h.errFile("tests", "%s", h.c.explain("tests/test.sh", err))
		}
		return h.errFile("tests", "no tests/test.sh: a Harbor task's verifier is tests/test.sh")
	}
	fs, err := h.readTree("tests")
	if err != nil {
		return err
	}
	v.Files, v.BinaryFiles, v.Executable = fs.text, fs.binary, fs.executable
	return nil
}

// solution turns solution/ into the scripted solution: the actions that
// upload its files to /solution, then bash /solution/solve.sh, as Harbor's
// oracle runs it, then done (whatever solve.sh exited with: Harbor's
// verifier decides). The upload is part of the script, not of the sandbox, so
// the solution exists only in the episodes -policy script runs.
func (h *harborLoader) solution(s *Spec) error {
	if _, err := h.c.stat("solution/solve.sh"); err != nil {
		if _, out := h.c.escapes("solution/solve.sh"); out {
			return h.errFile("solution", "%s", h.c.explain("solution/solve.sh", err))
		}
		return nil // no oracle: -policy script refuses the task, naming it
	}
	fs, err := h.readTree("solution")
	if err != nil {
		return err
	}
	files := map[string][]byte{}
	for p, c := range fs.text {
		files[p] = []byte(c)
	}
	for p, c := range fs.binary {
		files[p] = c
	}
	s.Solution = append(UploadActions(HarborSolutionDir, files, fs.executable), runtime.Action{
		Kind: runtime.ActExec, Cmd: exportPrefix(h.solutionEnv) + "bash " + HarborSolutionDir + "/solve.sh",
		TimeoutMS: time.Duration(s.Limits.ActionTimeout).Milliseconds(),
	}, runtime.Action{Kind: runtime.ActDone, Answer: "ran solution/solve.sh"})
	return nil
}

func exportPrefix(env map[string]string) string {
	if len(env) == 0 {
		return ""
	}
	return exportLine(env)
}

// readTree reads every file under rel (a folder of the task) as a file
// set: paths relative to it, UTF-8 files as text, others as bytes, and
// which are executable.
func (h *harborLoader) readTree(rel string) (fileSet, error) {
	out := fileSet{text: map[string]string{}}
	total := 0
	var refused error
	err := fs.WalkDir(h.c.root.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			refused = h.errFile(rel, "%s", h.c.explain(p, err))
			return refused
		}
		if d.IsDir() {
			return nil
		}
		name := strings.TrimPrefix(p, rel+"/")
		data, st, err := h.c.readFile(p, MaxFileBytes)
		switch {
		case errors.Is(err, errNotRegular):
			return fmt.Errorf("%s is not a regular file", p)
		case errors.Is(err, errTooLarge):
			return fmt.Errorf("%s is %d bytes; at most %d (a dataset records its tasks)", p, st.Size(), MaxFileBytes)
		case err != nil:
			// A symlink that leads outside the folder (os.Root refused
			// it), a dangling one, an unreadable file: named.
			refused = h.errFile(rel, "%s", h.c.explain(p, err))
			return refused
		}
		if total += len(data); total > MaxFilesBytes {
			return fmt.Errorf("the files of %s/ add up to more than %d bytes", rel, MaxFilesBytes)
		}
		if utf8.Valid(data) {
			out.text[name] = string(data)
		} else {
			if out.binary == nil {
				out.binary = map[string][]byte{}
			}
			out.binary[name] = data
		}
		if st.Mode()&0o100 != 0 {
			out.executable = append(out.executable, name)
		}
		return nil
	})
	if refused != nil {
		return fileSet{}, refused
	}
	if err != nil {
		return fileSet{}, h.errFile(rel, "%v", err)
	}
	sort.Strings(out.executable)
	return out, nil
}

// uploadChunk bounds the raw bytes of one base64 piece, and uploadCommand
// the bytes of one upload command: base64 makes 4 of 3, and a command must
// stay under MaxArgBytes.
const (
	uploadChunk   = 64 << 10
	uploadCommand = 110 << 10
)

// UploadActions are exec actions that write files (path relative to dir →
// content) under dir, an absolute path in the sandbox, with the named
// executables made 0755: base64 in chunks, several small files per
// command, each command well under what one execve argument may hold. They
// need sh, mkdir, base64 and chmod in the image.
func UploadActions(dir string, files map[string][]byte, executable []string) []runtime.Action {
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names)
	var actions []runtime.Action
	var cmd []string
	size := 0
	flush := func() {
		if len(cmd) > 0 {
			actions = append(actions, runtime.Action{Kind: runtime.ActExec, Cmd: strings.Join(cmd, " && "), TimeoutMS: 60_000})
			cmd, size = nil, 0
		}
	}
	add := func(piece string) {
		if size+len(piece) > uploadCommand {
			flush()
		}
		cmd = append(cmd, piece)
		size += len(piece) + 4
	}
	for _, p := range names {
		full := ShellQuote(dir + "/" + p)
		data := files[p]
		add("mkdir -p -- " + ShellQuote(filepathDir(dir+"/"+p)) + " && : > " + full)
		for off := 0; off < len(data); off += uploadChunk {
			end := min(off+uploadChunk, len(data))
			add("printf %s '" + base64.StdEncoding.EncodeToString(data[off:end]) + "' | base64 -d >> " + full)
		}
		if slices.Contains(executable, p) {
			add("chmod 0755 " + full)
		}
	}
	flush()
	return actions
}

func filepathDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}
