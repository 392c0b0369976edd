package docker

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
	"github.com/sourcegraph/conc/pool"

	"github.com/forkline/forkline/providers"
)

// Images the way users have them: named images pulled from their registry
// when missing (with the docker client's credentials, see auth.go), and
// images built from a Dockerfile, tagged by what they are built from, so
// the same build is made once and a later run makes none. Prepare gets
// every image a run needs before its first episode; Create gets one on
// demand when nobody prepared it.

// ParamPull is when named images are pulled: PullMissing (default) pulls
// an image that is not on the engine, PullAlways pulls every image (a tag
// that moved in the registry is updated; a build pulls its FROM images
// too), PullNever never pulls. forkline's own images (forkline/busybox,
// forkline/debian, forkline/chromium) are never pulled: forkline images
// builds them.
const ParamPull = "pull"

// The values of ParamPull.
const (
	PullMissing = "missing"
	PullAlways  = "always"
	PullNever   = "never"
)

// BuildRepository is the repository of the images Prepare builds; the tag
// is the build's key (BuildTag).
const BuildRepository = "forkline/build"

// DefaultBuildTimeout bounds a build whose Spec gives no timeout.
const DefaultBuildTimeout = 30 * time.Minute

// prepareParallel bounds how many images are pulled or built at once.
const prepareParallel = 4

// Pull retries: a pull that fails for a reason that may pass (a refused or
// reset connection, a timeout, a registry's 5xx or rate limit) is tried
// pullAttempts times, waiting pullBackoff, doubled each time up to
// pullBackoffMax. An answer that will not change — unauthorized, denied,
// not found — fails at once.
const (
	defaultPullAttempts   = 4
	defaultPullBackoff    = time.Second
	defaultPullBackoffMax = 30 * time.Second
)

// ImageStats counts what the provider did to get its images ready.
type ImageStats struct {
	Present int // already on the engine
	Pulled  int
	Built   int
}

// imageEntry is one image the provider got ready, or is getting ready.
type imageEntry struct {
	ready   chan struct{} // closed once the fields below are set
	ref     string        // what containers are created from
	workdir string        // the image's WORKDIR, "" when it sets none
	volumes []string      // the image's VOLUMEs, sorted
	err     error
}

// images is the provider's table of images by key (a named image's
// reference, or a build's tag).
type images struct {
	mu                     sync.Mutex
	entries                map[string]*imageEntry
	present, pulled, built atomic.Int64
}

// ImageStats reports what the provider did so far to get images ready.
func (p *Provider) ImageStats() ImageStats {
	return ImageStats{Present: int(p.imgs.present.Load()), Pulled: int(p.imgs.pulled.Load()), Built: int(p.imgs.built.Load())}
}

// imageFor is the image a Spec's sandboxes start from: its own, the
// default, or the one its Build makes (its tag computed from the context).
type imageFor struct {
	ref   string
	build *providers.Build
}

func (p *Provider) imageOf(spec providers.Spec) (imageFor, error) {
	if spec.Build != nil {
		tag, err := BuildTag(*spec.Build)
		if err != nil {
			return imageFor{}, err
		}
		return imageFor{ref: tag, build: spec.Build}, nil
	}
	if spec.Image != "" {
		return imageFor{ref: spec.Image}, nil
	}
	return imageFor{ref: p.image}, nil
}

// ensure gets img ready once per provider: concurrent callers wait for the
// first; a failure is remembered (the run's input is wrong; retrying every
// episode would only repeat it), unless ctx ended it.
func (p *Provider) ensure(ctx context.Context, img imageFor, progress io.Writer) (*imageEntry, error) {
	p.imgs.mu.Lock()
	e, ok := p.imgs.entries[img.ref]
	if !ok {
		e = &imageEntry{ready: make(chan struct{})}
		p.imgs.entries[img.ref] = e
	}
	p.imgs.mu.Unlock()
	if ok {
		select {
		case <-e.ready:
			return e, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e.ref = img.ref
	e.workdir, e.volumes, e.err = p.acquire(ctx, img, progress)
	if e.err != nil && ctx.Err() != nil {
		// Not the image's fault: let the next caller try again.
		p.imgs.mu.Lock()
		delete(p.imgs.entries, img.ref)
		p.imgs.mu.Unlock()
	}
	close(e.ready)
	return e, e.err
}

// acquire makes img present on the engine and returns its WORKDIR and its
// VOLUMEs.
func (p *Provider) acquire(ctx context.Context, img imageFor, progress io.Writer) (string, []string, error) {
	if progress == nil {
		progress = io.Discard
	}
	ins, err := p.cli.ImageInspect(ctx, img.ref)
	present := err == nil
	if err != nil && !cerrdefs.IsNotFound(err) {
		if gerr := p.gone(ctx, "inspecting image "+img.ref, err); gerr != nil {
			return "", nil, gerr
		}
		return "", nil, fmt.Errorf("docker: inspecting image %s: %w", img.ref, err)
	}
	switch {
	case img.build != nil && present:
		p.imgs.present.Add(1)
	case img.build != nil:
		if err := p.checkOwnBases(ctx, *img.build); err != nil {
			return "", nil, err
		}
		if err := p.build(ctx, img.ref, *img.build, progress); err != nil {
			return "", nil, err
		}
		p.imgs.built.Add(1)
	case isOwnImage(img.ref):
		if !present {
			return "", nil, missingImage(img.ref, err)
		}
		p.imgs.present.Add(1)
	case present && p.pull != PullAlways:
		p.imgs.present.Add(1)
	case p.pull == PullNever:
		return "", nil, fmt.Errorf("%w: %w: %q, and the provider's param %s=%s forbids pulling it", providers.ErrCannotPrepare, ErrImageMissing, img.ref, ParamPull, PullNever)
	default:
		if err := p.pullImage(ctx, img.ref, progress); err != nil {
			if present {
				return "", nil, err // pull=always of an image the engine has: the pull failed
			}
			return "", nil, fmt.Errorf("docker: %w: %q, and pulling it failed (load or import it, or fix what the pull says): %w", ErrImageMissing, img.ref, err)
		}
		p.imgs.pulled.Add(1)
	}
	if !present || img.build != nil {
		if ins, err = p.cli.ImageInspect(ctx, img.ref); err != nil {
			return "", nil, fmt.Errorf("docker: image %s is not there after it was made ready: %w", img.ref, err)
		}
	}
	if ins.Config != nil {
		return ins.Config.WorkingDir, sortedKeys(ins.Config.Volumes), nil
	}
	return "", nil, nil
}

// isOwnImage reports whether ref names one of the images forkline builds
// itself: they are in no registry.
func isOwnImage(ref string) bool {
	base, _, _ := strings.Cut(ref, ":")
	_, ok := builders[base]
	return ok
}

// checkOwnBases refuses, before the engine is asked to build, a Dockerfile
// built FROM one of forkline's own images that is not on the engine: the
// engine would try to pull it from Docker Hub, where it is not ("lookup
// registry-1.docker.io: no such host" on a machine without a registry),
// while the remedy is to build it here, which the error says.
func (p *Provider) checkOwnBases(ctx context.Context, b providers.Build) error {
	data, err := os.ReadFile(filepath.Join(b.Context, dockerfileName(b)))
	if err != nil {
		return nil // the build says what is wrong with the Dockerfile
	}
	for _, base := range fromImages(string(data)) {
		if !isOwnImage(base) {
			continue
		}
		_, err := p.cli.ImageInspect(ctx, base)
		if err == nil {
			continue
		}
		if !cerrdefs.IsNotFound(err) {
			return nil // the build meets the same engine, and says so
		}
		return fmt.Errorf("docker: building the image of %s: its Dockerfile builds FROM %s: %w", b.Context, base, missingImage(base, err))
	}
	return nil
}

// fromImages are the images a Dockerfile's FROM lines name, in order,
// without the stages it builds itself (FROM builder) or names made of
// build arguments.
func fromImages(dockerfile string) []string {
	stages := map[string]bool{}
	var out []string
	for _, line := range strings.Split(dockerfile, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.EqualFold(f[0], "FROM") {
			continue
		}
		f = f[1:]
		for len(f) > 0 && strings.HasPrefix(f[0], "--") {
			f = f[1:] // --platform=...
		}
		if len(f) == 0 {
			continue
		}
		image := f[0]
		if !stages[strings.ToLower(image)] && !strings.Contains(image, "$") {
			out = append(out, image)
		}
		if len(f) >= 3 && strings.EqualFold(f[1], "AS") {
			stages[strings.ToLower(f[2])] = true
		}
	}
	return out
}

// Prepare gets the image of every spec ready (providers.Preparer): the
// distinct images, prepareParallel at a time — named images pulled when
// missing (or always, per ParamPull), Dockerfiles built once per build
// key — and checks that every network the specs name exists. Failures are
// joined, each naming the image or build, and wrap
// providers.ErrCannotPrepare (or ErrEngineGone when the engine went away).
// progress gets a line per pull's progress and per build step, and a
// summary.
func (p *Provider) Prepare(ctx context.Context, specs []providers.Spec, progress io.Writer) error {
	if err := p.checkOpen(); err != nil {
		return err
	}
	if progress == nil {
		progress = io.Discard
	}
	wctx, stop := p.watch(ctx)
	defer stop()
	began := time.Now()
	before := p.ImageStats()
	var imgs []imageFor
	seen := map[string]bool{}
	networks := map[string]bool{}
	var errs []error
	for _, s := range specs {
		if s.GUI != nil {
			errs = append(errs, fmt.Errorf("docker: %w", providers.ErrNoGUI))
			continue
		}
		img, err := p.imageOf(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", providers.ErrCannotPrepare, err))
			continue
		}
		if !seen[img.ref] {
			seen[img.ref] = true
			imgs = append(imgs, img)
		}
		// The images of a compose environment's services: named, or
		// built from the task's files.
		for _, svc := range s.Services {
			img, err := serviceImage(svc)
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: service %s: %w", providers.ErrCannotPrepare, svc.Name, err))
				continue
			}
			if !seen[img.ref] {
				seen[img.ref] = true
				imgs = append(imgs, img)
			}
		}
		for _, n := range []string{s.Resources.Network, s.SetupNetwork} {
			if n == "" {
				n = p.network
			}
			networks[n] = true
		}
	}
	for _, n := range sortedKeys(networks) {
		if err := p.checkNetwork(wctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	pl := pool.New().WithMaxGoroutines(prepareParallel)
	var mu sync.Mutex
	for _, img := range imgs {
		pl.Go(func() {
			if _, err := p.ensure(wctx, img, progress); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	pl.Wait()
	if err := cause(wctx, errors.Join(errs...)); err != nil {
		if errors.Is(err, ErrEngineGone) || ctx.Err() != nil {
			return err
		}
		if !errors.Is(err, providers.ErrCannotPrepare) {
			err = fmt.Errorf("%w: %w", providers.ErrCannotPrepare, err)
		}
		return err
	}
	if err := p.trialServices(wctx, specs, progress); err != nil {
		if errors.Is(err, ErrEngineGone) || ctx.Err() != nil {
			return err
		}
		if !errors.Is(err, providers.ErrCannotPrepare) {
			err = fmt.Errorf("%w: %w", providers.ErrCannotPrepare, err)
		}
		return err
	}
	after := p.ImageStats()
	fmt.Fprintf(progress, "docker: %d images ready in %s: %d built, %d pulled, %d already on the engine\n",
		len(imgs), time.Since(began).Round(time.Millisecond), after.Built-before.Built, after.Pulled-before.Pulled, after.Present-before.Present)
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkNetwork fails unless the engine has network mode n: none and host
// always exist; container:ID is the engine's to check at create; any
// other name (bridge included: an engine started with --bridge=none has
// none) must be a network of the engine.
func (p *Provider) checkNetwork(ctx context.Context, n string) error {
	if p.runtimeNoNetwork && n != "none" {
		return fmt.Errorf("%w: network %q: the engine runs runtime %s with --network=none, so its containers have no network", providers.ErrCannotPrepare, n, p.runtime)
	}
	if n == "none" || n == "host" || strings.HasPrefix(n, "container:") {
		return nil
	}
	_, err := p.cli.NetworkInspect(ctx, n, client.NetworkInspectOptions{})
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: network %q does not exist on the engine at %s (an engine started with --bridge=none has no bridge): create it or choose another network", providers.ErrCannotPrepare, n, p.cli.DaemonHost())
	}
	if gerr := p.gone(ctx, "inspecting network "+n, err); gerr != nil {
		return gerr
	}
	return fmt.Errorf("%w: inspecting network %q: %w", providers.ErrCannotPrepare, n, err)
}

// pullImage pulls ref with the docker client's credentials for its
// registry, retrying what may pass, writing progress lines.
func (p *Provider) pullImage(ctx context.Context, ref string, progress io.Writer) error {
	creds, err := lookupCredentials(ctx, ref)
	if err != nil {
		return fmt.Errorf("%w: pulling %s: %w", providers.ErrCannotPrepare, ref, err)
	}
	header, err := creds.header()
	if err != nil {
		return fmt.Errorf("%w: pulling %s: %w", providers.ErrCannotPrepare, ref, err)
	}
	with := "anonymously (no credentials for its registry in the docker client's configuration)"
	if creds.source != "" {
		with = "with the credentials from " + creds.source
	}
	wait := p.pullBackoff
	for attempt := 1; ; attempt++ {
		err = p.pullOnce(ctx, ref, header, progress)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("docker: pulling %s: %w", ref, ctx.Err())
		}
		if gerr := p.gone(ctx, "pulling "+ref, err); gerr != nil {
			return gerr
		}
		if !transientPullError(err) || attempt >= p.pullAttempts {
			how := ""
			if transientPullError(err) {
				how = fmt.Sprintf(" (after %d attempts)", attempt)
			}
			return fmt.Errorf("%w: pulling %s %s failed%s: %w", providers.ErrCannotPrepare, ref, with, how, err)
		}
		fmt.Fprintf(progress, "docker: pulling %s: attempt %d of %d failed (%v); again in %s\n", ref, attempt, p.pullAttempts, err, wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("docker: pulling %s: %w", ref, ctx.Err())
		}
		wait = min(wait*2, defaultPullBackoffMax)
	}
}

// transientPullError reports whether a pull's error may pass on a retry:
// the registry or the way to it failed, as opposed to an answer that will
// not change (unauthorized, denied, not found, a bad reference).
func transientPullError(err error) bool {
	msg := strings.ToLower(err.Error())
	for _, final := range []string{"unauthorized", "authentication required", "no basic auth credentials", "denied",
		"not found", "manifest unknown", "invalid reference", "no such host", "repository name must", "does not exist"} {
		if strings.Contains(msg, final) {
			return false
		}
	}
	for _, passing := range []string{"connection refused", "connection reset", "timeout", "timed out", "eof",
		"toomanyrequests", "too many requests", "503", "502", "504", "500 internal", "service unavailable", "bad gateway",
		"temporary failure", "tls handshake"} {
		if strings.Contains(msg, passing) {
			return true
		}
	}
	return false
}

// pullProgress aggregates a pull's layer messages into lines.
type pullProgress struct {
	ref     string
	out     io.Writer
	began   time.Time
	last    time.Time
	order   []string
	total   map[string]int64
	current map[string]int64
	done    map[string]bool
}

func (pp *pullProgress) update(m jsonstream.Message) {
	if m.ID == "" || m.ID == pp.ref || strings.Contains(m.ID, ":") {
		return // the image's own status lines, not a layer's
	}
	if _, known := pp.total[m.ID]; !known {
		pp.order = append(pp.order, m.ID)
		pp.total[m.ID] = 0
	}
	switch {
	case m.Status == "Downloading" && m.Progress != nil:
		pp.current[m.ID] = m.Progress.Current
		if m.Progress.Total > 0 {
			pp.total[m.ID] = m.Progress.Total
		}
	case m.Status == "Download complete", m.Status == "Pull complete", m.Status == "Already exists":
		pp.done[m.ID] = true
		if pp.total[m.ID] > 0 {
			pp.current[m.ID] = pp.total[m.ID]
		}
	}
	if time.Since(pp.last) >= time.Second {
		pp.line("pulling")
	}
}

func (pp *pullProgress) line(verb string) {
	pp.last = time.Now()
	var cur, tot int64
	for _, id := range pp.order {
		cur += pp.current[id]
		tot += pp.total[id]
	}
	done := 0
	for _, id := range pp.order {
		if pp.done[id] {
			done++
		}
	}
	fmt.Fprintf(pp.out, "docker: %s %s: %d of %d layers, %s of %s in %s\n", verb, pp.ref, done, len(pp.order),
		humanBytes(cur), humanBytes(tot), time.Since(pp.began).Round(time.Millisecond))
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// pullOnce makes one pull request and reads its progress to the end.
func (p *Provider) pullOnce(ctx context.Context, ref, header string, progress io.Writer) error {
	resp, err := p.cli.ImagePull(ctx, ref, client.ImagePullOptions{RegistryAuth: header})
	if err != nil {
		return err
	}
	defer resp.Close()
	pp := &pullProgress{ref: ref, out: progress, began: time.Now(), last: time.Now(),
		total: map[string]int64{}, current: map[string]int64{}, done: map[string]bool{}}
	for m, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return err
		}
		if m.Error != nil {
			return m.Error
		}
		pp.update(m)
	}
	pp.line("pulled")
	return nil
}

// BuildTag is the tag of the image b builds: BuildRepository and the
// first 32 hex digits of the sha256 of the context's files (slash paths,
// types and permission bits, contents, symlink targets; no times or
// owners), the Dockerfile's path, the build arguments and the target. Two
// builds with the same inputs share one image, wherever their contexts
// lie.
func BuildTag(b providers.Build) (string, error) {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("forkline build v1")
	field(dockerfileName(b))
	args := make([]string, 0, len(b.Args))
	for k, v := range b.Args {
		args = append(args, k+"="+v)
	}
	sort.Strings(args)
	for _, a := range args {
		field("arg " + a)
	}
	field("target " + b.Target)
	err := walkContext(b.Context, func(rel string, info fs.FileInfo, link string, open func() (io.ReadCloser, error)) error {
		field(rel)
		field(info.Mode().Type().String() + info.Mode().Perm().String())
		field(link)
		if open == nil {
			return nil
		}
		f, err := open()
		if err != nil {
			return err
		}
		defer f.Close()
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(info.Size()))
		h.Write(n[:])
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", err
	}
	return BuildRepository + ":" + hex.EncodeToString(h.Sum(nil))[:32], nil
}

func dockerfileName(b providers.Build) string {
	if b.Dockerfile == "" {
		return "Dockerfile"
	}
	return b.Dockerfile
}

// walkContext visits every entry of a build context in lexical order: its
// slash path relative to dir, its info, a symlink's target, and for a
// regular file a way to open it. A .dockerignore is refused: it is the
// client that applies it, and forkline does not yet, so the whole context
// would reach the build.
func walkContext(dir string, visit func(rel string, info fs.FileInfo, link string, open func() (io.ReadCloser, error)) error) error {
	if _, err := os.Stat(filepath.Join(dir, ".dockerignore")); err == nil {
		return fmt.Errorf("docker: build context %s has a .dockerignore, which forkline does not apply", dir)
	}
	if err := walkTree(dir, visit); err != nil {
		return fmt.Errorf("docker: build context %s: %w", dir, err)
	}
	return nil
}

// walkTree visits every entry below dir in lexical order, as walkContext
// says; symlinks are visited as links, never followed.
func walkTree(dir string, visit func(rel string, info fs.FileInfo, link string, open func() (io.ReadCloser, error)) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch mode := info.Mode(); {
		case mode.IsDir():
			return visit(rel, info, "", nil)
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return visit(rel, info, target, nil)
		case mode.IsRegular():
			return visit(rel, info, "", func() (io.ReadCloser, error) { return os.Open(p) })
		default:
			return fmt.Errorf("%s is a %s, which a build context cannot send", p, mode.Type())
		}
	})
}

// writeTarEntry writes one entry named name (a directory's with a slash
// added) with info's mode and time, link's target for a symlink, owned by
// root, and the content open gives (nil: none).
func writeTarEntry(tw *tar.Writer, name string, info fs.FileInfo, link string, open func() (io.ReadCloser, error)) error {
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	hdr.Name = name
	if info.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
	hdr.Format = tar.FormatPAX
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if open == nil {
		return nil
	}
	f, err := open()
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

// writeContextTar writes dir as the tar stream a build takes, as the
// docker CLI sends it: modes and modification times kept, owners root.
func writeContextTar(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := walkContext(dir, func(rel string, info fs.FileInfo, link string, open func() (io.ReadCloser, error)) error {
		return writeTarEntry(tw, rel, info, link, open)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// LabelBuildContext records, on a built image, the context it was built
// from, for the people who list images.
const LabelBuildContext = "forkline.build.context"

// build builds b into tag with the engine's builder (the legacy one:
// Engine 20.10 has no other without BuildKit's frontend, which a `#
// syntax=` line would pull), writing the engine's output to a log file and
// a line per step to progress. A failing build is an error naming the step
// that failed, the engine's message and the log.
func (p *Provider) build(ctx context.Context, tag string, b providers.Build, progress io.Writer) error {
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = DefaultBuildTimeout
	}
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The work directory may not exist yet (collect -workdir names one to
	// be made): a build is often the first thing a run writes there.
	if err := os.MkdirAll(p.logDir(), 0o755); err != nil {
		return fmt.Errorf("%w: docker: build log: %w", providers.ErrCannotPrepare, err)
	}
	logPath := filepath.Join(p.logDir(), "forkline-build-"+strings.TrimPrefix(tag, BuildRepository+":")+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("%w: docker: build log: %w", providers.ErrCannotPrepare, err)
	}
	defer logFile.Close()
	what := fmt.Sprintf("the image of %s (%s)", b.Context, dockerfileName(b))
	fmt.Fprintf(progress, "docker: building %s as %s (log: %s)\n", what, tag, logPath)
	fmt.Fprintf(logFile, "forkline: building %s as %s\n", what, tag)

	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 1<<20)
		err := writeContextTar(b.Context, bw)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	args := map[string]*string{}
	for k, v := range b.Args {
		args[k] = &v
	}
	began := time.Now()
	res, err := p.cli.ImageBuild(bctx, pr, client.ImageBuildOptions{
		Tags: []string{tag}, Dockerfile: dockerfileName(b), BuildArgs: args, Target: b.Target,
		Remove: true, ForceRemove: true, PullParent: p.pull == PullAlways, Version: build.BuilderV1,
		Labels: map[string]string{LabelImage: "build", LabelBuildContext: b.Context},
	})
	if err != nil {
		_ = pr.CloseWithError(err)
		if gerr := p.gone(ctx, "building "+what, err); gerr != nil {
			return gerr
		}
		return fmt.Errorf("%w: docker: building %s: %w (log: %s)", providers.ErrCannotPrepare, what, err, logPath)
	}
	defer res.Body.Close()
	step, failure := "", ""
	dec := json.NewDecoder(res.Body)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); err != nil {
			if !errors.Is(err, io.EOF) && failure == "" {
				failure = err.Error()
			}
			break
		}
		if m.Stream != "" {
			io.WriteString(logFile, m.Stream)
			for _, line := range strings.Split(m.Stream, "\n") {
				if strings.HasPrefix(line, "Step ") {
					step = strings.TrimSpace(line)
					fmt.Fprintf(progress, "docker: build %s: %s\n", tag, step)
				}
			}
		}
		if m.Error != nil && failure == "" {
			failure = m.Error.Message
			fmt.Fprintf(logFile, "forkline: the build failed: %s\n", failure)
		}
	}
	_ = pr.Close()
	switch {
	case bctx.Err() != nil && ctx.Err() == nil:
		return fmt.Errorf("%w: docker: building %s timed out after %s at %q (log: %s)", providers.ErrCannotPrepare, what, timeout, step, logPath)
	case ctx.Err() != nil:
		return fmt.Errorf("docker: building %s: %w", what, ctx.Err())
	case failure != "":
		at := ""
		if step != "" {
			at = " at " + step
		}
		return fmt.Errorf("%w: docker: building %s failed%s: %s (log: %s)", providers.ErrCannotPrepare, what, at, strings.TrimSpace(failure), logPath)
	}
	fmt.Fprintf(progress, "docker: built %s in %s\n", tag, time.Since(began).Round(time.Millisecond))
	return nil
}

// logDir is where build logs go: Options.Dir, else the system's temporary
// directory.
func (p *Provider) logDir() string {
	if p.dir != "" {
		return p.dir
	}
	return os.TempDir()
}
