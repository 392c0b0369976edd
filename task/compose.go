package task

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/template"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"
)

// Compose is a multi-container environment: the services that run beside
// the task's own sandbox (Harbor's "main" service), read from a Harbor task's
// environment/docker-compose.yaml. The sandbox is the main service; Services
// are the others, each started from its image before the sandbox, in
// depends_on order, on a network of the environment's own where every
// service's name resolves. A provider that cannot run them refuses the task
// (providers.Capabilities.Services).
type Compose struct {
	// File is the compose file, relative to the task folder.
	File string `json:"file"`
	// Services are the services other than main, in the order they start
	// (every service after the services it depends on; ties by name).
	Services []Service `json:"services"`
}

// Service is one service of a Compose environment.
type Service struct {
	Name  string `json:"name"`
	Image string `json:"image"`
	// Command and Entrypoint override the image's (nil keeps the image's).
	Command    []string          `json:"command,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
	User       string            `json:"user,omitempty"`
	Health     *Health           `json:"healthcheck,omitempty"`
	// DependsOn maps each service this one waits for to the condition:
	// ServiceStarted or ServiceHealthy.
	DependsOn map[string]string `json:"depends_on,omitempty"`
	// CPUs and MemoryMB bound the service's container (deploy.resources.limits,
	// cpus, mem_limit); zero is the provider's default, never unlimited.
	CPUs     float64 `json:"cpus,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
	// Build, when set, builds the service's image from a Dockerfile of the
	// task's folder (compose's build:); Image is then empty.
	Build *Build `json:"build,omitempty"`
	// Copies are the task's own files a compose bind volume names, copied
	// into the service's container before its first start (see Copy).
	Copies []Copy `json:"copies,omitempty"`
}

// Copy is a file or directory of the task's folder that a compose service
// binds (volumes: ["./seed:/var/lib/app/seed:ro"]). forkline copies it into
// the service's container before the golden starts it, instead of binding
// it: the copy is committed with the service, so every fork has its own,
// and no fork can change a host file another one reads.
type Copy struct {
	// Source is the file or directory, an absolute host path inside the
	// task's folder (not part of the spec's hash; Digest is).
	Source string `json:"source"`
	// Path is Source relative to the task's folder, slash-separated.
	Path string `json:"path"`
	// Target is where the copy goes in the service's container.
	Target string `json:"target"`
	// Digest is the sha256 of Source's files (DigestTree).
	Digest string `json:"digest"`
}

// Health is a service's healthcheck, as compose gives it: Test is the
// engine's form (["CMD", ...] or ["CMD-SHELL", "..."]).
type Health struct {
	Test        []string `json:"test"`
	Interval    Duration `json:"interval,omitempty"`
	Timeout     Duration `json:"timeout,omitempty"`
	StartPeriod Duration `json:"start_period,omitempty"`
	Retries     int      `json:"retries,omitempty"`
}

// The depends_on conditions a Compose environment may use.
const (
	ServiceStarted = "service_started"
	ServiceHealthy = "service_healthy"
)

// HarborMainService is the name Harbor gives the agent's own container in
// a task's compose file; forkline's sandbox is that service.
const HarborMainService = "main"

// composeFiles are the names Harbor's docker environment looks for, in its
// order.
var composeFiles = []string{"docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"}

// The keys a service other than main may have. Everything else compose
// knows is refused by name: it either reaches outside the environment
// (ports, volumes, networks, secrets, configs, privileged, devices, ...) or
// would do nothing silently.
var serviceKeys = []string{"image", "build", "volumes", "command", "entrypoint", "environment", "env_file", "working_dir", "user", "healthcheck", "depends_on", "expose", "cpus", "mem_limit", "deploy", "stop_grace_period", "tty", "stdin_open", "init"}

// The keys the main service may have in the task's file: its image comes
// from task.toml (docker_image) or environment/Dockerfile, its command is
// forkline's, its limits are task.toml's.
var mainKeys = []string{"environment", "env_file", "depends_on", "expose", "image"}

// Why a compose key is refused, for the ones a task is likely to use.
var refusedWhy = map[string]string{
	"build":          "main's image is built from environment/Dockerfile (or given by task.toml's docker_image)",
	"ports":          "host ports are not published: services reach each other by name on the environment's own network",
	"volumes":        "main's files are its image's: put what it needs in environment/ and COPY it in its Dockerfile",
	"networks":       "a compose environment runs on one network of its own, made per fork, where every service's name resolves",
	"secrets":        "build and run secrets are not supported",
	"configs":        "configs are not supported",
	"container_name": "container names are made per fork, so forks never share one",
	"network_mode":   "a compose environment runs on one network of its own",
	"privileged":     "privileged containers are not allowed",
	"cap_add":        "added capabilities are not supported for services",
	"devices":        "host devices are not allowed",
	"pid":            "sharing the host's process namespace is not allowed",
	"ipc":            "sharing an ipc namespace is not allowed",
	"extends":        "extends reads other files: put the service in the task's compose file",
	"include":        "include reads other files: put the services in the task's compose file",
	"profiles":       "profiles would leave services out silently",
	"restart":        "services are not restarted: a service that exits is an environment that failed",
	"command":        "main's command is forkline's (its sandbox's keeper)",
	"entrypoint":     "main's entrypoint is forkline's",
}

// The top-level keys a compose file may have.
var composeTopKeys = []string{"services", "name", "version", "volumes"}

// The keys a service's build may have. The build runs as main's
// environment/Dockerfile build does: the engine's builder, its default build
// network, the context sent whole from the task's folder.
var buildKeys = []string{"context", "dockerfile", "args", "target"}

// Why a build key is refused.
var buildRefusedWhy = map[string]string{
	"secrets":             "build secrets are not supported: a task's build gets nothing of the host's",
	"ssh":                 "a build's ssh agent is not supported: a task's build gets nothing of the host's",
	"network":             "a service's build runs on the engine's default build network, as main's environment/Dockerfile build does",
	"additional_contexts": "a build's context is one folder of the task",
	"dockerfile_inline":   "put the Dockerfile in the task's folder",
	"cache_from":          "build caches are the engine's: the same build is made once, tagged by its content",
	"cache_to":            "build caches are the engine's: the same build is made once, tagged by its content",
	"tags":                "a built image is tagged by its content (forkline/build:HASH)",
	"labels":              "labels are forkline's",
	"privileged":          "privileged builds are not allowed",
	"entitlements":        "build entitlements are not allowed",
	"extra_hosts":         "a build's hosts are the engine's",
}

// composeEnvVars are the variables a compose file may interpolate: those
// Harbor's docker environment sets, and nothing of the host's (a task
// folder is third-party input, and the host's environment may hold
// secrets).
func composeEnvVars(envDir, image string) map[string]string {
	return map[string]string{
		"CONTEXT_DIR":         envDir,
		"MAIN_IMAGE_NAME":     composeMainPlaceholder,
		"PREBUILT_IMAGE_NAME": image,
	}
}

// composeMainPlaceholder is main's image as forkline's base file gives it,
// so that a task's compose file may mention main without an image (as
// Harbor's base file gives main one).
const composeMainPlaceholder = "forkline-harbor-main"

// composeFile returns the name of the task's compose file under
// environment/, or "".
func (h *harborLoader) composeFile() string {
	for _, name := range composeFiles {
		if _, err := h.c.lstat("environment/" + name); err == nil {
			return name
		}
	}
	return ""
}

// compose reads environment/NAME with compose-go, the Compose project's
// own loader, as Harbor's docker environment uses it: Harbor merges a base
// file that defines main (built from environment/ or pulled from
// docker_image) with the task's file, so the task's file may add services
// and override main's environment and depends_on. What forkline cannot run
// in a fork of its own is refused by name.
func (h *harborLoader) compose(s *Spec, name string) error {
	rel := "environment/" + name
	show := filepath.Join("environment", name)
	content, _, err := h.c.readFile(rel, MaxFileBytes)
	if err != nil {
		return h.errFile(show, "%s", h.c.explain(rel, err))
	}
	cerr := func(path []string, format string, args ...any) error {
		e := &SpecError{File: filepath.Join(h.show, show), Field: strings.Join(path, "."), Msg: fmt.Sprintf(format, args...)}
		e.Line, e.Col = yamlPosition(content, path)
		return e
	}
	if s.Network != nil && s.Network.Episode != NetworkNone {
		return cerr(nil, "a compose environment runs on a network of its own with no route out; task.toml asks for network %q (give network_mode no-network)", s.Network.Episode)
	}
	if err := h.composeGuard(content, cerr); err != nil {
		return err
	}
	envDir := filepath.Join(h.dir, "environment")
	base := []byte("services:\n  " + HarborMainService + ":\n    image: ${MAIN_IMAGE_NAME}\n")
	details := types.ConfigDetails{
		WorkingDir: envDir,
		ConfigFiles: []types.ConfigFile{
			{Filename: filepath.Join(envDir, "forkline-harbor-base.yaml"), Content: base},
			{Filename: filepath.Join(envDir, name), Content: content},
		},
		Environment: composeEnvVars(envDir, s.Image),
	}
	opts := func(o *loader.Options) {
		o.SetProjectName("forkline", true)
		o.ResourceLoaders = nil // nothing remote: no git, no OCI artifacts
		o.SkipInclude = false
		if o.Interpolate != nil {
			o.Interpolate.Substitute = strictSubstitute
		}
	}
	ctx := context.Background()
	// The model first: the keys as the file spells them, validated against
	// the compose schema, for the allow lists below.
	model, err := loader.LoadModelWithContext(ctx, details, opts, func(o *loader.Options) {
		o.SkipNormalization = true // no default network added: the keys as written
	})
	if err != nil {
		return composeLoadError(cerr, err)
	}
	services, _ := model["services"].(map[string]any)
	shortBuild := map[string]bool{} // build: DIR, no mapping
	for _, svc := range slices.Sorted(maps.Keys(services)) {
		def, _ := services[svc].(map[string]any)
		known := serviceKeys
		if svc == HarborMainService {
			known = mainKeys
		}
		for _, k := range slices.Sorted(maps.Keys(def)) {
			if !slices.Contains(known, k) {
				return cerr([]string{"services", svc, k}, "%s", refusedReason(k, known))
			}
		}
		if isScalar(content, []string{"services", svc, "build"}) {
			shortBuild[svc] = true
		}
		if b, ok := def["build"].(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(b)) {
				if slices.Contains(buildKeys, k) {
					continue
				}
				why, ok := buildRefusedWhy[k]
				if !ok {
					why = "supported: " + strings.Join(buildKeys, ", ")
				}
				return cerr([]string{"services", svc, "build", k}, "not supported: %s", why)
			}
		}
		if d, ok := def["deploy"].(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(d)) {
				if k != "resources" {
					return cerr([]string{"services", svc, "deploy", k}, "only deploy.resources.limits (cpus, memory) is supported")
				}
			}
			r, _ := d["resources"].(map[string]any)
			for _, k := range slices.Sorted(maps.Keys(r)) {
				if k != "limits" {
					return cerr([]string{"services", svc, "deploy", "resources", k}, "only deploy.resources.limits (cpus, memory) is supported")
				}
			}
			l, _ := r["limits"].(map[string]any)
			for _, k := range slices.Sorted(maps.Keys(l)) {
				if k != "cpus" && k != "memory" {
					return cerr([]string{"services", svc, "deploy", "resources", "limits", k}, "only deploy.resources.limits cpus and memory are supported")
				}
			}
		}
	}
	// The top-level keys after the services': a build's secrets are
	// named as the build's, not as the top-level secrets they refer to.
	for _, k := range slices.Sorted(maps.Keys(model)) {
		if !slices.Contains(composeTopKeys, k) {
			return cerr([]string{k}, "%s", refusedReason(k, composeTopKeys))
		}
	}
	vols, _ := model["volumes"].(map[string]any)
	for _, v := range slices.Sorted(maps.Keys(vols)) {
		def, _ := vols[v].(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(def)) {
			return cerr([]string{"volumes", v, k}, "not supported: a named volume is a directory of the service's own container, committed with it; driver, external and name would reach outside the environment")
		}
	}
	project, err := loader.LoadWithContext(ctx, details, opts)
	if err != nil {
		return composeLoadError(cerr, err)
	}
	for _, svc := range project.Services {
		for _, f := range svc.EnvFiles {
			if !insideDir(envDir, f.Path) {
				return cerr([]string{"services", svc.Name, "env_file"}, "%s is outside the task's environment folder", f.Path)
			}
		}
	}
	main := project.Services[HarborMainService]
	if main.Image != composeMainPlaceholder {
		if s.Build != nil || s.Image != "" {
			return cerr([]string{"services", HarborMainService, "image"}, "main's image is already given by task.toml's docker_image or environment/Dockerfile")
		}
		s.Image = main.Image
	}
	for k, v := range main.Environment {
		if v == nil {
			continue
		}
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		if _, set := s.Env[k]; !set {
			s.Env[k] = *v
		}
	}
	c := &Compose{File: filepath.ToSlash(show)}
	for _, name := range startOrder(project) {
		svc := project.Services[name]
		out := Service{Name: name, Image: svc.Image, WorkingDir: svc.WorkingDir, User: svc.User}
		if svc.Build != nil {
			b, err := h.serviceBuild(name, svc.Build, shortBuild[name], cerr)
			if err != nil {
				return err
			}
			out.Build, out.Image = b, ""
		}
		if svc.Image == "" && svc.Build == nil {
			return cerr([]string{"services", name, "image"}, "missing: every service other than main needs an image or a build")
		}
		for i, v := range svc.Volumes {
			c, err := h.serviceVolume(project, name, i, v, cerr)
			if err != nil {
				return err
			}
			if c != nil {
				out.Copies = append(out.Copies, *c)
			}
		}
		if svc.Command != nil {
			out.Command = []string(svc.Command)
		}
		if svc.Entrypoint != nil {
			out.Entrypoint = []string(svc.Entrypoint)
		}
		for k, v := range svc.Environment {
			if v == nil {
				continue
			}
			if out.Env == nil {
				out.Env = map[string]string{}
			}
			out.Env[k] = *v
		}
		for dep, d := range svc.DependsOn {
			if dep == HarborMainService {
				return cerr([]string{"services", name, "depends_on", dep}, "main starts after every other service, so no service can wait for it")
			}
			switch d.Condition {
			case ServiceStarted, ServiceHealthy:
			default:
				return cerr([]string{"services", name, "depends_on", dep, "condition"}, "%s is not supported (known: %s, %s)", d.Condition, ServiceStarted, ServiceHealthy)
			}
			if d.Condition == ServiceHealthy && !hasHealthcheck(project.Services[dep]) {
				return cerr([]string{"services", name, "depends_on", dep}, "waits for %s to be healthy, and %s has no healthcheck", dep, dep)
			}
			if out.DependsOn == nil {
				out.DependsOn = map[string]string{}
			}
			out.DependsOn[dep] = d.Condition
		}
		if hc := svc.HealthCheck; hasHealthcheck(svc) {
			out.Health = &Health{Test: []string(hc.Test)}
			if hc.Interval != nil {
				out.Health.Interval = Duration(time.Duration(*hc.Interval))
			}
			if hc.Timeout != nil {
				out.Health.Timeout = Duration(time.Duration(*hc.Timeout))
			}
			if hc.StartPeriod != nil {
				out.Health.StartPeriod = Duration(time.Duration(*hc.StartPeriod))
			}
			if hc.Retries != nil {
				out.Health.Retries = int(*hc.Retries)
			}
		}
		out.CPUs = float64(svc.CPUS)
		out.MemoryMB = int64(svc.MemLimit) >> 20
		if d := svc.Deploy; d != nil {
			if l := d.Resources.Limits; l != nil {
				if l.NanoCPUs > 0 {
					out.CPUs = float64(l.NanoCPUs)
				}
				if l.MemoryBytes > 0 {
					out.MemoryMB = int64(l.MemoryBytes) >> 20
				}
			}
		}
		c.Services = append(c.Services, out)
	}
	if len(c.Services) == 0 {
		return cerr([]string{"services"}, "no service other than main: give the task an environment/Dockerfile or a docker_image instead")
	}
	s.Compose = c
	return nil
}

// hasHealthcheck says whether svc has a healthcheck that runs.
func hasHealthcheck(svc types.ServiceConfig) bool {
	hc := svc.HealthCheck
	return hc != nil && !hc.Disable && len(hc.Test) > 0 && hc.Test[0] != "NONE"
}

// startOrder is the services other than main, each after the services it
// depends on, ties by name. compose-go has refused cycles already.
func startOrder(p *types.Project) []string {
	var order []string
	done := map[string]bool{HarborMainService: true}
	var visit func(string)
	visit = func(n string) {
		if done[n] {
			return
		}
		done[n] = true
		deps := slices.Sorted(maps.Keys(p.Services[n].DependsOn))
		for _, d := range deps {
			visit(d)
		}
		order = append(order, n)
	}
	names := slices.Sorted(maps.Keys(p.Services))
	for _, n := range names {
		visit(n)
	}
	return order
}

// refusedReason says why key is refused, listing the known keys.
func refusedReason(key string, known []string) string {
	if why, ok := refusedWhy[key]; ok {
		return "not supported: " + why
	}
	return fmt.Sprintf("not supported in a forkline compose environment (supported: %s)", strings.Join(known, ", "))
}

var schemaErr = regexp.MustCompile(`^validating (.+?): (\S+) (.*)$`)

// composeLoadError turns compose-go's error into a SpecError that names the
// file, the field and, where the file has it, its line.
func composeLoadError(cerr func([]string, string, ...any) error, err error) error {
	msg := err.Error()
	if m := schemaErr.FindStringSubmatch(msg); m != nil {
		path := strings.Split(m[2], ".")
		why := m[3]
		if why == "false schema" || strings.HasPrefix(why, "additional properties") {
			why = "not a key of the compose specification"
		}
		return cerr(path, "%s", why)
	}
	var missing *template.MissingRequiredError
	if errors.As(err, &missing) {
		return cerr(nil, "%s", msg)
	}
	return cerr(nil, "%s", strings.TrimSuffix(msg, ": invalid compose project"))
}

// strictSubstitute interpolates like compose, except that a variable with
// no value and no default is an error, not an empty string: forkline gives
// a compose file only the variables Harbor sets (composeEnvVars).
func strictSubstitute(tmpl string, m template.Mapping) (string, error) {
	return template.SubstituteWithOptions(tmpl, m, template.WithoutLogging, template.WithReplacementFunction(func(sub string, m template.Mapping, cfg *template.Config) (string, error) {
		v, ok, err := template.DefaultReplacementAppliedFunc(sub, m, cfg)
		if err == nil && !ok {
			known := slices.Sorted(maps.Keys(composeEnvVars("", "")))
			return "", fmt.Errorf("variable %s is not set (a task's compose file sees only %s, never the host's environment)", sub, strings.Join(known, ", "))
		}
		return v, err
	}))
}

// insideDir says whether p is dir or below it.
func insideDir(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// yamlPosition is the line and column of path (mapping keys) in a YAML
// document, or of its longest prefix found; 0, 0 when none is.
func yamlPosition(content []byte, path []string) (int, int) {
	var doc yaml.Node
	if yaml.Unmarshal(content, &doc) != nil || len(doc.Content) == 0 {
		return 0, 0
	}
	n := doc.Content[0]
	line, col := 0, 0
	for _, key := range path {
		if i, err := strconv.Atoi(key); err == nil && n.Kind == yaml.SequenceNode {
			if i < 0 || i >= len(n.Content) {
				break
			}
			n = n.Content[i]
			line, col = n.Line, n.Column
			continue
		}
		if n.Kind != yaml.MappingNode {
			break
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				line, col = n.Content[i].Line, n.Content[i].Column
				n = n.Content[i+1]
				found = true
				break
			}
		}
		if !found {
			break
		}
	}
	return line, col
}

// ServiceNames lists c's services by name, in start order.
func (c *Compose) ServiceNames() []string {
	out := make([]string, len(c.Services))
	for i, s := range c.Services {
		out[i] = s.Name
	}
	return out
}

// composeGuard refuses, before compose-go reads anything, what would make
// it read files other than the compose file: include, extends, label_file,
// and an env_file outside environment/ (or reached through a symlink that
// leaves the task folder). A task folder is third-party input; a host file
// read into a service's environment would enter the task's spec.
func (h *harborLoader) composeGuard(content []byte, cerr func([]string, string, ...any) error) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(content, &doc); err != nil {
		return cerr(nil, "%v", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return cerr(nil, "is not a compose file (a mapping with services)")
	}
	get := func(n *yaml.Node, key string) *yaml.Node {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1]
			}
		}
		return nil
	}
	top := doc.Content[0]
	if get(top, "include") != nil {
		return cerr([]string{"include"}, "not supported: %s", refusedWhy["include"])
	}
	services := get(top, "services")
	if services == nil || services.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(services.Content); i += 2 {
		name, svc := services.Content[i].Value, services.Content[i+1]
		if get(svc, "extends") != nil {
			return cerr([]string{"services", name, "extends"}, "not supported: %s", refusedWhy["extends"])
		}
		if get(svc, "label_file") != nil {
			return cerr([]string{"services", name, "label_file"}, "not supported: labels are forkline's")
		}
		if err := guardBuild(name, get(svc, "build"), get, cerr); err != nil {
			return err
		}
		ef := get(svc, "env_file")
		if ef == nil {
			continue
		}
		var paths []string
		switch ef.Kind {
		case yaml.ScalarNode:
			paths = append(paths, ef.Value)
		case yaml.SequenceNode:
			for _, e := range ef.Content {
				if e.Kind == yaml.ScalarNode {
					paths = append(paths, e.Value)
				} else if p := get(e, "path"); p != nil {
					paths = append(paths, p.Value)
				}
			}
		}
		for _, p := range paths {
			rel := filepath.ToSlash(filepath.Join("environment", p))
			_, out := h.c.escapes(rel)
			if filepath.IsAbs(p) || strings.Contains(p, "$") || !strings.HasPrefix(rel, "environment/") || out {
				return cerr([]string{"services", name, "env_file"}, "%s is outside the task's environment folder", p)
			}
		}
	}
	return nil
}

// unescapedVar finds a $ that compose would interpolate ($$ is a literal $).
var unescapedVar = regexp.MustCompile(`\$[{A-Za-z_]`)

// guardBuild refuses, in the file as written, a build context that is not
// a folder of the task's (an absolute path, a URL, a git remote) and a
// build argument that is not a literal value: an argument without a value,
// or one made of a variable, would take it from an environment, and the
// host's never reaches a task.
func guardBuild(name string, b *yaml.Node, get func(*yaml.Node, string) *yaml.Node, cerr func([]string, string, ...any) error) error {
	if b == nil {
		return nil
	}
	path := []string{"services", name, "build"}
	ctxNode := b
	if b.Kind == yaml.MappingNode {
		ctxNode = get(b, "context")
		path = append(path, "context")
	}
	if ctxNode != nil && ctxNode.Kind == yaml.ScalarNode {
		v := ctxNode.Value
		// ${CONTEXT_DIR} (Harbor's environment/) is allowed: where the
		// context leads once interpolated is checked after loading.
		if filepath.IsAbs(v) || strings.HasPrefix(v, "~") || strings.Contains(v, "://") || strings.HasPrefix(v, "git@") {
			return cerr(path, "%s is not a folder of the task: a service's build context is a folder inside the task's folder, relative to environment/", v)
		}
	}
	args := get(b, "args")
	if args == nil {
		return nil
	}
	apath := []string{"services", name, "build", "args"}
	switch args.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(args.Content); i += 2 {
			k, v := args.Content[i], args.Content[i+1]
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				return cerr(append(apath, k.Value), "has no value: it would be taken from the environment, and a task's build gets only literal values")
			}
			if unescapedVar.MatchString(strings.ReplaceAll(v.Value, "$$", "")) {
				return cerr(append(apath, k.Value), "%q is not a literal value: a task's build arguments are literal (write $$ for a $)", v.Value)
			}
		}
	case yaml.SequenceNode:
		for i, e := range args.Content {
			k, _, ok := strings.Cut(e.Value, "=")
			if !ok {
				return cerr(append(apath, strconv.Itoa(i)), "%s has no value: it would be taken from the environment, and a task's build gets only literal values", e.Value)
			}
			if unescapedVar.MatchString(strings.ReplaceAll(e.Value, "$$", "")) {
				return cerr(append(apath, strconv.Itoa(i)), "%s is not a literal value: a task's build arguments are literal (write $$ for a $)", k)
			}
		}
	}
	return nil
}

// serviceBuild turns a service's build into a Build: its context a folder
// inside the task's folder (a symlink is followed only while it stays
// inside), its Dockerfile a file inside the context, its content digested
// into the task's hash.
func (h *harborLoader) serviceBuild(name string, b *types.BuildConfig, short bool, cerr func([]string, string, ...any) error) (*Build, error) {
	path := []string{"services", name, "build", "context"}
	if short {
		path = path[:3]
	}
	rel, err := filepath.Rel(h.dir, b.Context)
	if err != nil || !insideDir(h.dir, b.Context) {
		return nil, cerr(path, "%s is outside the task's folder: a service's build context is a folder inside it", b.Context)
	}
	rel = filepath.ToSlash(rel)
	if st, err := h.c.stat(rel); err != nil || !st.IsDir() {
		if _, out := h.c.escapes(rel); out {
			return nil, cerr(path, "%s", h.c.explain(rel, err))
		}
		return nil, cerr(path, "%s is not a folder of the task", rel)
	}
	abs := b.Context
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real // the folder itself, not a link to it: the build walks it
	}
	out := &Build{Context: abs, Dockerfile: b.Dockerfile, Target: b.Target, Timeout: Duration(h.buildTimeout)}
	if out.Dockerfile == DefaultDockerfile {
		out.Dockerfile = ""
	}
	dpath := path
	if b.Dockerfile != "" && b.Dockerfile != DefaultDockerfile {
		dpath = []string{"services", name, "build", "dockerfile"}
	}
	if filepath.IsAbs(b.Dockerfile) {
		return nil, cerr(dpath, "%s is not a path inside the build context", b.Dockerfile)
	}
	if msg := checkDockerfile(abs, out.Dockerfile); msg != "" {
		return nil, cerr(dpath, "%s", msg)
	}
	for k, v := range b.Args {
		if v == nil {
			return nil, cerr([]string{"services", name, "build", "args", k}, "has no value: a task's build gets only literal values")
		}
		if out.Args == nil {
			out.Args = map[string]string{}
		}
		out.Args[k] = *v
	}
	if out.ContextDigest, err = DigestTree(abs); err != nil {
		return nil, cerr(path, "%s", strings.TrimPrefix(err.Error(), "task: "))
	}
	return out, nil
}

// serviceVolume reads a service's i-th volume. A bind of a file or folder
// of the task's becomes a Copy; a named or anonymous volume is a directory
// of the service's own container (nothing to do: its files are committed
// with the service, as any other of its files); anything that would reach
// the host, or share files between services, is refused.
func (h *harborLoader) serviceVolume(p *types.Project, name string, i int, v types.ServiceVolumeConfig, cerr func([]string, string, ...any) error) (*Copy, error) {
	path := []string{"services", name, "volumes", strconv.Itoa(i)}
	if !strings.HasPrefix(v.Target, "/") || filepath.Clean(v.Target) == "/" {
		return nil, cerr(path, "target %q: want an absolute path below /", v.Target)
	}
	switch v.Type {
	case types.VolumeTypeBind:
		if v.Bind != nil && v.Bind.Propagation != "" && v.Bind.Propagation != "rprivate" {
			return nil, cerr(path, "bind propagation %s is not supported: the task's files are copied into the service, not bound", v.Bind.Propagation)
		}
		if !insideDir(h.dir, v.Source) {
			return nil, cerr(path, "%s is outside the task's folder: a service's bind volume is a file or folder of the task, copied into the service (a host path is never bound)", v.Source)
		}
		rel, _ := filepath.Rel(h.dir, v.Source)
		rel = filepath.ToSlash(rel)
		st, err := h.c.stat(rel)
		if err != nil || !(st.IsDir() || st.Mode().IsRegular()) {
			if _, out := h.c.escapes(rel); out {
				return nil, cerr(path, "%s", h.c.explain(rel, err))
			}
			if err != nil {
				return nil, cerr(path, "%s is not in the task's folder (a bind volume is a file or folder of the task, copied into the service)", rel)
			}
			return nil, cerr(path, "%s is not a file or a folder", rel)
		}
		src := v.Source
		if real, err := filepath.EvalSymlinks(src); err == nil {
			src = real
		}
		// A link inside a copied folder is copied as a link; one that
		// leads out of the task's folder is refused, as every read of a
		// task's files is.
		if st.IsDir() {
			werr := filepath.WalkDir(src, func(q string, d fs.DirEntry, err error) error {
				if err != nil || d.Type()&fs.ModeSymlink == 0 {
					return err
				}
				r, _ := filepath.Rel(src, q)
				lrel := filepath.ToSlash(filepath.Join(rel, r))
				if _, out := h.c.escapes(lrel); out {
					return errors.New(h.c.explain(lrel, fs.ErrNotExist))
				}
				return nil
			})
			if werr != nil {
				return nil, cerr(path, "%v", werr)
			}
		}
		digest, err := DigestTree(src)
		if err != nil {
			return nil, cerr(path, "%s", strings.TrimPrefix(err.Error(), "task: "))
		}
		return &Copy{Source: src, Path: rel, Target: filepath.Clean(v.Target), Digest: digest}, nil
	case types.VolumeTypeVolume:
		if v.Volume != nil && (v.Volume.NoCopy || v.Volume.Subpath != "") {
			return nil, cerr(path, "volume nocopy and subpath are not supported: a volume is a directory of the service's own container")
		}
		if v.Source != "" {
			for other, svc := range p.Services {
				if other == name {
					continue
				}
				for _, ov := range svc.Volumes {
					if ov.Type == types.VolumeTypeVolume && ov.Source == v.Source {
						return nil, cerr(path, "volume %s is also %s's: a volume shared between services is not supported (each service's files are its own, committed with it)", v.Source, other)
					}
				}
			}
		}
		return nil, nil
	}
	return nil, cerr(path, "a %s volume is not supported (a bind of the task's own files, or a named or anonymous volume, is)", v.Type)
}

// isScalar says whether path (mapping keys) is a scalar in the YAML
// document content, as written.
func isScalar(content []byte, path []string) bool {
	var doc yaml.Node
	if yaml.Unmarshal(content, &doc) != nil || len(doc.Content) == 0 {
		return false
	}
	n := doc.Content[0]
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return false
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return false
		}
		n = next
	}
	return n.Kind == yaml.ScalarNode
}
