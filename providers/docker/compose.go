package docker

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/forkline/forkline/providers"
)

// A sandbox of a Spec with Services (a compose environment) is its main
// container and one container per service, all on a bridge network of the
// sandbox's own, made Internal (no route out of it) and labelled like every
// other object of the provider, so Close and Sweep find it. Every service is
// reached by its name (a network alias, answered by the engine's DNS), the
// sandbox by providers.MainService. A checkpoint commits every service with
// the sandbox; a fork makes a new network and starts every service again
// from its committed image, so the forks of one checkpoint never share a
// service: a write to one fork's database is invisible to the others. The
// services' processes start again in every fork (files carried, processes
// not), as the sandbox's do.

// LabelService names the compose service a container runs.
const LabelService = "forkline.service"

// ServiceCapabilities are the capabilities a service's container keeps:
// DefaultCapabilities and what a server that starts as root and drops to a
// user of its own (a database, a web server) needs: SETUID, SETGID, and
// NET_BIND_SERVICE for a port below 1024. Every other one is dropped.
var ServiceCapabilities = []string{"SETUID", "SETGID", "NET_BIND_SERVICE"}

// Docker's healthcheck defaults, which bound the wait for a service
// without values of its own.
const (
	defaultHealthInterval = 30 * time.Second
	defaultHealthTimeout  = 30 * time.Second
	defaultHealthRetries  = 3
)

// serviceSlack is added to a healthcheck's own bound on the wait for it.
const serviceSlack = 30 * time.Second

// composeEnv is the network and service containers of one sandbox.
type composeEnv struct {
	netID, netName string
	containers     []serviceContainer // in start order
}

type serviceContainer struct {
	name, id string
}

// startServices makes the sandbox's network and starts ss.services on it,
// each after the services it depends on are started or healthy, then waits
// until every service with a healthcheck is healthy (as compose up --wait
// does). On failure nothing is left.
func (p *Provider) startServices(ctx context.Context, ss sandboxSpec, cpID string) (*composeEnv, error) {
	p.mu.Lock()
	p.seq++
	name := fmt.Sprintf("forkline-%s-%d", tagSafe(p.runID), p.seq)
	p.mu.Unlock()
	labels := p.objectLabels(ss.labels, "network", cpID)
	created, err := p.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge", Internal: true, Labels: labels})
	if err != nil {
		if gerr := p.gone(ctx, "creating network "+name, err); gerr != nil {
			return nil, gerr
		}
		return nil, fmt.Errorf("docker: creating network %s: %w", name, err)
	}
	env := &composeEnv{netID: created.ID, netName: name}
	for _, svc := range ss.services {
		for dep, cond := range svc.DependsOn {
			if cond != providers.ConditionHealthy {
				continue
			}
			if err := p.waitHealthy(ctx, env, dep, healthBound(ss.services, dep)); err != nil {
				p.removeEnv(ctx, env)
				return nil, err
			}
		}
		id, err := p.startService(ctx, env, svc, ss.labels, cpID)
		if err != nil {
			p.removeEnv(ctx, env)
			return nil, err
		}
		env.containers = append(env.containers, serviceContainer{name: svc.Name, id: id})
	}
	for _, svc := range ss.services {
		if svc.Health == nil {
			if err := p.checkRunning(ctx, env, svc.Name); err != nil {
				p.removeEnv(ctx, env)
				return nil, err
			}
			continue
		}
		if err := p.waitHealthy(ctx, env, svc.Name, healthBound(ss.services, svc.Name)); err != nil {
			p.removeEnv(ctx, env)
			return nil, err
		}
	}
	return env, nil
}

// objectLabels are the labels of an object of a sandbox of this provider.
func (p *Provider) objectLabels(specLabels map[string]string, kind, cpID string) map[string]string {
	labels := copyLabels(specLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelRun] = p.runID
	labels[LabelOwner] = p.owner
	labels[LabelInstance] = p.instance
	labels[LabelKind] = kind
	if cpID != "" {
		labels[LabelCheckpoint] = cpID
	}
	return labels
}

// startService creates and starts one service's container on env's network.
func (p *Provider) startService(ctx context.Context, env *composeEnv, svc providers.Service, specLabels map[string]string, cpID string) (string, error) {
	labels := p.objectLabels(specLabels, "service", cpID)
	labels[LabelService] = svc.Name
	hc := &container.HostConfig{NetworkMode: container.NetworkMode(env.netName), Runtime: p.runtime}
	p.initMu.Lock()
	useInit := p.useInit
	p.initMu.Unlock()
	hc.Init = &useInit
	res := svc.Resources
	res.Capabilities = append(append([]string(nil), ServiceCapabilities...), res.Capabilities...)
	res.Capabilities = dedup(res.Capabilities)
	if err := p.applyLimits(hc, res); err != nil {
		return "", err
	}
	cfg := &container.Config{
		Image:      svc.Image,
		Env:        svc.Env,
		WorkingDir: svc.WorkingDir,
		User:       svc.User,
		Labels:     labels,
		Hostname:   svc.Name,
	}
	if svc.Command != nil {
		cfg.Cmd = svc.Command
	}
	if svc.Entrypoint != nil {
		cfg.Entrypoint = svc.Entrypoint
	}
	if h := svc.Health; h != nil {
		cfg.Healthcheck = &container.HealthConfig{Test: h.Test, Interval: h.Interval, Timeout: h.Timeout, StartPeriod: h.StartPeriod, Retries: h.Retries}
	}
	created, err := p.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     cfg,
		HostConfig: hc,
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			env.netName: {Aliases: []string{svc.Name}},
		}},
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("service %s: %w", svc.Name, missingImage(svc.Image, err))
		}
		if gerr := p.gone(ctx, "creating service "+svc.Name, err); gerr != nil {
			return "", gerr
		}
		return "", fmt.Errorf("docker: creating service %s from %s: %w", svc.Name, svc.Image, err)
	}
	for _, c := range svc.Copies {
		if err := p.copyInto(ctx, created.ID, c); err != nil {
			_ = p.removeContainer(ctx, created.ID)
			if gerr := p.gone(ctx, "copying into service "+svc.Name, err); gerr != nil {
				return "", gerr
			}
			return "", fmt.Errorf("docker: %w: service %s: copying %s to %s: %w", providers.ErrCannotPrepare, svc.Name, c.Source, c.Target, err)
		}
	}
	if _, err := p.cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		_ = p.removeContainer(ctx, created.ID)
		if gerr := p.gone(ctx, "starting service "+svc.Name, err); gerr != nil {
			return "", gerr
		}
		return "", fmt.Errorf("docker: starting service %s from %s: %w", svc.Name, svc.Image, err)
	}
	return created.ID, nil
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, v := range s {
		if !seen[strings.ToUpper(v)] {
			seen[strings.ToUpper(v)] = true
			out = append(out, v)
		}
	}
	return out
}

// healthBound is how long a wait for name's healthcheck may take: its start
// period and its retries of interval plus timeout, and some slack.
func healthBound(services []providers.Service, name string) time.Duration {
	for _, s := range services {
		if s.Name != name || s.Health == nil {
			continue
		}
		h := s.Health
		interval, timeout, retries := h.Interval, h.Timeout, h.Retries
		if interval <= 0 {
			interval = defaultHealthInterval
		}
		if timeout <= 0 {
			timeout = defaultHealthTimeout
		}
		if retries <= 0 {
			retries = defaultHealthRetries
		}
		return h.StartPeriod + time.Duration(retries+1)*(interval+timeout) + serviceSlack
	}
	return serviceSlack
}

func (env *composeEnv) idOf(name string) string {
	for _, c := range env.containers {
		if c.name == name {
			return c.id
		}
	}
	return ""
}

// waitHealthy waits until the service's healthcheck passes; a service that
// exits, or that the engine declares unhealthy, or that is not healthy
// within bound, fails the wait with its last healthcheck output.
func (p *Provider) waitHealthy(ctx context.Context, env *composeEnv, name string, bound time.Duration) error {
	id := env.idOf(name)
	deadline := time.Now().Add(bound)
	for {
		ins, err := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			if gerr := p.gone(ctx, "inspecting service "+name, err); gerr != nil {
				return gerr
			}
			return fmt.Errorf("docker: inspecting service %s: %w", name, err)
		}
		st := ins.Container.State
		if st == nil || !st.Running {
			return p.serviceExited(ctx, name, id, st)
		}
		status, last := "", ""
		if st.Health != nil {
			status = string(st.Health.Status)
			if n := len(st.Health.Log); n > 0 {
				last = strings.TrimSpace(st.Health.Log[n-1].Output)
			}
		}
		switch status {
		case "healthy":
			return nil
		case "unhealthy":
			return fmt.Errorf("docker: %w: service %s is unhealthy: its healthcheck failed every retry (last output: %q)", providers.ErrCannotPrepare, name, tail(last, 400))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("docker: %w: service %s did not become healthy within %s (last healthcheck output: %q)", providers.ErrCannotPrepare, name, bound.Round(time.Second), tail(last, 400))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkRunning fails when a service without a healthcheck is no longer
// running once all have started.
func (p *Provider) checkRunning(ctx context.Context, env *composeEnv, name string) error {
	id := env.idOf(name)
	ins, err := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("docker: inspecting service %s: %w", name, err)
	}
	if st := ins.Container.State; st == nil || !st.Running {
		return p.serviceExited(ctx, name, id, st)
	}
	return nil
}

// serviceExited is the error of a service whose container stopped, with
// the end of its output.
func (p *Provider) serviceExited(ctx context.Context, name, id string, st *container.State) error {
	code := -1
	if st != nil {
		code = st.ExitCode
	}
	out := ""
	if r, err := p.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"}); err == nil {
		b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
		_ = r.Close()
		out = strings.TrimSpace(stripStreamHeaders(b))
	}
	return fmt.Errorf("docker: %w: service %s exited (code %d) before the environment was ready; its last output: %q", providers.ErrCannotPrepare, name, code, tail(out, 400))
}

// stripStreamHeaders removes the engine's 8-byte frame headers from a
// multiplexed log stream.
func stripStreamHeaders(b []byte) string {
	var sb strings.Builder
	for len(b) >= 8 && (b[0] == 1 || b[0] == 2) {
		n := int(b[4])<<24 | int(b[5])<<16 | int(b[6])<<8 | int(b[7])
		b = b[8:]
		if n > len(b) {
			n = len(b)
		}
		sb.Write(b[:n])
		b = b[n:]
	}
	sb.Write(b)
	return sb.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// removeEnv removes env's service containers, then its network, detached
// from ctx's cancellation.
func (p *Provider) removeEnv(ctx context.Context, env *composeEnv) error {
	if env == nil {
		return nil
	}
	errs := make([]error, len(env.containers)+1)
	forEachParallel(len(env.containers), 4, func(i int) {
		errs[i] = p.removeContainer(ctx, env.containers[i].id)
	})
	rctx, cancel := detach(ctx, removeTimeout)
	defer cancel()
	if _, err := p.cli.NetworkRemove(rctx, env.netID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		errs[len(env.containers)] = fmt.Errorf("docker: removing network %s: %w", env.netName, err)
	}
	return errors.Join(errs...)
}

// commitServices commits every service of s (paused together, so the
// services' files are one moment's) to images labelled as checkpoint cpRef's,
// and returns the services of the forks: each from its committed image.
// On failure the images made so far are removed.
func (p *Provider) commitServices(ctx context.Context, s *sandbox, ref, label string) ([]providers.Service, []string, error) {
	env := s.env
	var paused []string
	defer func() {
		for _, id := range paused {
			_, _ = p.cli.ContainerUnpause(context.WithoutCancel(ctx), id, client.ContainerUnpauseOptions{})
		}
	}()
	for _, c := range env.containers {
		if _, err := p.cli.ContainerPause(ctx, c.id, client.ContainerPauseOptions{}); err != nil {
			return nil, nil, s.infraError(ctx, "pausing service "+c.name, err)
		}
		paused = append(paused, c.id)
	}
	out := make([]providers.Service, len(s.spec.services))
	var images []string
	for i, svc := range s.spec.services {
		res, err := p.cli.ContainerCommit(ctx, env.idOf(svc.Name), client.ContainerCommitOptions{
			Reference: ref + "-" + tagSafe(svc.Name),
			Comment:   "forkline checkpoint " + label + ", service " + svc.Name,
			NoPause:   true,
			Config: &container.Config{Labels: map[string]string{
				LabelKind: "checkpoint", LabelCheckpointLabel: label, LabelService: svc.Name,
				LabelRun: p.runID, LabelOwner: p.owner, LabelInstance: p.instance,
			}},
		})
		if err != nil {
			for _, im := range images {
				p.removeImage(ctx, im)
			}
			return nil, nil, s.infraError(ctx, "committing service "+svc.Name, err)
		}
		images = append(images, res.ID)
		// The fork starts from what the golden's service holds: its build
		// and its copies are in the committed image.
		svc.Image, svc.Build, svc.Copies = res.ID, nil, nil
		out[i] = svc
	}
	return out, images, nil
}

// trialServices starts the services of every distinct compose environment
// of specs once, waits until they are ready (started, healthy), and removes
// them: a service that exits or never gets healthy fails Prepare, before
// any episode and before a dataset is written, instead of failing every
// golden build of the run.
func (p *Provider) trialServices(ctx context.Context, specs []providers.Spec, progress io.Writer) error {
	seen := map[string]bool{}
	var errs []error
	for _, s := range specs {
		if len(s.Services) == 0 {
			continue
		}
		services, err := p.resolveServices(ctx, s.Services)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// The key: the services as they start (a build is its image's tag
		// now), pointers followed.
		k, err := json.Marshal(services)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		key := string(k)
		if seen[key] {
			continue
		}
		seen[key] = true
		names := make([]string, len(s.Services))
		for i, svc := range s.Services {
			names[i] = svc.Name
		}
		began := time.Now()
		env, err := p.startServices(ctx, sandboxSpec{services: services, labels: copyLabels(s.Labels)}, "")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := p.removeEnv(ctx, env); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(progress, "docker: services %s start and get ready (%s)\n", strings.Join(names, ", "), time.Since(began).Round(time.Millisecond))
	}
	return errors.Join(errs...)
}

// serviceImage is the image a service starts from: its own, or the one
// its Build makes (tagged by the build's content, as a sandbox's is).
func serviceImage(svc providers.Service) (imageFor, error) {
	if svc.Build != nil {
		tag, err := BuildTag(*svc.Build)
		if err != nil {
			return imageFor{}, err
		}
		return imageFor{ref: tag, build: svc.Build}, nil
	}
	return imageFor{ref: svc.Image}, nil
}

// resolveServices gets every service's image ready (pulled or built once
// per provider, see ensure) and returns the services with Image set to it.
// An image that declares a VOLUME is refused: docker commit does not carry
// a volume's contents, so what the golden's service wrote there would be
// missing from every fork, silently.
func (p *Provider) resolveServices(ctx context.Context, services []providers.Service) ([]providers.Service, error) {
	out := make([]providers.Service, len(services))
	for i, svc := range services {
		img, err := serviceImage(svc)
		if err != nil {
			return nil, fmt.Errorf("%w: service %s: %w", providers.ErrCannotPrepare, svc.Name, err)
		}
		e, err := p.ensure(ctx, img, nil)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", svc.Name, err)
		}
		if len(e.volumes) > 0 {
			return nil, fmt.Errorf("docker: %w: service %s: its image %s declares VOLUME %s: a checkpoint (docker commit) does not carry a volume's contents, so every fork would start with what the golden's service wrote there missing; use an image without VOLUME (a volume is inherited from the base image, so build the service FROM one without it)",
				providers.ErrCannotPrepare, svc.Name, img.ref, strings.Join(e.volumes, ", "))
		}
		svc.Image = e.ref
		out[i] = svc
	}
	return out, nil
}

// copyInto copies c.Source (a host file or directory) to c.Target in the
// container id, created and not yet started: its files owned by root, with
// their modes; symlinks copied as links. Missing parents of c.Target are
// made by the engine.
func (p *Provider) copyInto(ctx context.Context, id string, c providers.Copy) error {
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 1<<20)
		err := writeCopyTar(c.Source, strings.TrimPrefix(path.Clean(c.Target), "/"), bw)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	_, err := p.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: pr})
	_ = pr.CloseWithError(err)
	return err
}

// writeCopyTar writes src as a tar stream whose entries are under name
// (src itself is name).
func writeCopyTar(src, name string, w io.Writer) error {
	tw := tar.NewWriter(w)
	add := func(rel string, info fs.FileInfo, link string, open func() (io.ReadCloser, error)) error {
		full := name
		if rel != "" {
			full += "/" + rel
		}
		return writeTarEntry(tw, full, info, link, open)
	}
	info, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case info.Mode().IsRegular():
		err = add("", info, "", func() (io.ReadCloser, error) { return os.Open(src) })
	case info.IsDir():
		if err = add("", info, "", nil); err == nil {
			err = walkTree(src, add)
		}
	default:
		err = fmt.Errorf("%s is a %s: only a file or a directory is copied", src, info.Mode().Type())
	}
	if err != nil {
		return err
	}
	return tw.Close()
}
