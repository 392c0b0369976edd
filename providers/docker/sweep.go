package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// SweepOptions say which runs' objects Sweep removes. An object is removed
// when either rule selects it.
type SweepOptions struct {
	// RunID removes every container and checkpoint image of that run,
	// whoever owns it.
	RunID string
	// DeadOwners removes the objects whose LabelOwner ("pid@hostname") names
	// a process on this host that no longer exists. Objects of other hosts
	// are never touched by this rule: their owners cannot be checked from
	// here. A pid that was reused keeps its objects alive, the safe way to
	// be wrong.
	DeadOwners bool
}

// SweepResult lists what Sweep removed.
type SweepResult struct {
	Containers []string // container ids
	Images     []string // image ids
	Networks   []string // network ids (the networks of compose environments)
}

// Sweep removes forkline containers, networks and checkpoint images
// (objects carrying LabelRun) that opts selects: containers first (forced),
// then networks, then images,
// newest first so a checkpoint of a fork goes before the checkpoint it grew
// from. Base images (LabelImage, no run label) are never touched. New runs
// Sweep with DeadOwners unless the "sweep" param is "off"; call it yourself
// after a crash, or with a RunID to clean up a run that is known to be over.
func Sweep(ctx context.Context, cli *client.Client, opts SweepOptions) (SweepResult, error) {
	if opts.RunID == "" && !opts.DeadOwners {
		return SweepResult{}, errors.New("docker: Sweep needs a RunID or DeadOwners")
	}
	host, _ := os.Hostname()
	selected := func(labels map[string]string) bool {
		if opts.RunID != "" && labels[LabelRun] == opts.RunID {
			return true
		}
		return opts.DeadOwners && ownerDead(labels[LabelOwner], host)
	}
	return removeLabelled(ctx, cli, LabelRun, selected)
}

// ownerDead reports whether owner ("pid@hostname") names a process of this
// host that does not exist.
func ownerDead(owner, host string) bool {
	pidText, ownerHost, ok := strings.Cut(owner, "@")
	if !ok || ownerHost != host || host == "" {
		return false
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// removeLabelled removes the containers, then the images, that carry the
// label filter (a key, or key=value) and that keep selects.
func removeLabelled(ctx context.Context, cli *client.Client, filter string, keep func(labels map[string]string) bool) (SweepResult, error) {
	var res SweepResult
	var errs []error
	cl, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", filter)})
	if err != nil {
		return res, fmt.Errorf("docker: listing containers: %w", err)
	}
	var ids []string
	for _, c := range cl.Items {
		if keep(c.Labels) {
			ids = append(ids, c.ID)
		}
	}
	removed := make([]bool, len(ids))
	failed := make([]error, len(ids))
	forEachParallel(len(ids), 4, func(i int) {
		_, err := cli.ContainerRemove(ctx, ids[i], client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		switch {
		case err == nil:
			removed[i] = true
		case cerrdefs.IsNotFound(err):
		case cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress"):
			// Another sweep (a provider opening at the same time) is on it.
		default:
			failed[i] = fmt.Errorf("docker: removing container %s: %w", shortID(ids[i]), err)
		}
	})
	for i, id := range ids {
		if removed[i] {
			res.Containers = append(res.Containers, id)
		}
		if failed[i] != nil {
			errs = append(errs, failed[i])
		}
	}

	// Networks after the containers on them.
	nl, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).Add("label", filter)})
	if err != nil {
		return res, errors.Join(append(errs, fmt.Errorf("docker: listing networks: %w", err))...)
	}
	for _, n := range nl.Items {
		if !keep(n.Labels) {
			continue
		}
		_, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{})
		switch {
		case err == nil:
			res.Networks = append(res.Networks, n.ID)
		case cerrdefs.IsNotFound(err):
		default:
			errs = append(errs, fmt.Errorf("docker: removing network %s: %w", n.Name, err))
		}
	}

	il, err := cli.ImageList(ctx, client.ImageListOptions{All: true, Filters: make(client.Filters).Add("label", filter)})
	if err != nil {
		return res, errors.Join(append(errs, fmt.Errorf("docker: listing images: %w", err))...)
	}
	type img struct {
		id      string
		created int64
	}
	var imgs []img
	for _, im := range il.Items {
		if _, base := im.Labels[LabelImage]; base && im.Labels[LabelRun] == "" {
			continue
		}
		if keep(im.Labels) {
			imgs = append(imgs, img{im.ID, im.Created})
		}
	}
	sort.Slice(imgs, func(i, j int) bool { return imgs[i].created > imgs[j].created })
	// An image with a child checkpoint refuses removal until the child is
	// gone; a few passes settle any order the timestamps got wrong.
	pending := imgs
	var lastErrs []error
	for pass := 0; pass < 4 && len(pending) > 0; pass++ {
		var again []img
		lastErrs = nil
		for _, im := range pending {
			_, err := cli.ImageRemove(ctx, im.id, client.ImageRemoveOptions{Force: true, PruneChildren: true})
			switch {
			case err == nil:
				res.Images = append(res.Images, im.id)
			case cerrdefs.IsNotFound(err) || imageGone(ctx, cli, im.id):
				// Removed meanwhile by someone else (another sweep); the
				// engine does not always say so with a 404.
			default:
				again = append(again, im)
				lastErrs = append(lastErrs, fmt.Errorf("docker: removing image %s: %w", shortID(im.id), err))
			}
		}
		if len(again) == len(pending) {
			break // no progress: another pass would fail the same way
		}
		pending = again
	}
	errs = append(errs, lastErrs...)
	return res, errors.Join(errs...)
}

// imageGone reports whether image id no longer exists.
func imageGone(ctx context.Context, cli *client.Client, id string) bool {
	_, err := cli.ImageInspect(ctx, id)
	return cerrdefs.IsNotFound(err)
}

// listLabelled describes the containers and images carrying the label
// filter.
func listLabelled(ctx context.Context, cli *client.Client, filter string) ([]string, error) {
	var out []string
	cl, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", filter)})
	if err != nil {
		return nil, fmt.Errorf("docker: listing containers: %w", err)
	}
	for _, c := range cl.Items {
		out = append(out, fmt.Sprintf("container %s (%s, %s)", shortID(c.ID), c.State, c.Labels[LabelKind]))
	}
	il, err := cli.ImageList(ctx, client.ImageListOptions{All: true, Filters: make(client.Filters).Add("label", filter)})
	if err != nil {
		return nil, fmt.Errorf("docker: listing images: %w", err)
	}
	for _, im := range il.Items {
		out = append(out, fmt.Sprintf("image %s %v", shortID(im.ID), im.RepoTags))
	}
	nl, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).Add("label", filter)})
	if err != nil {
		return nil, fmt.Errorf("docker: listing networks: %w", err)
	}
	for _, n := range nl.Items {
		out = append(out, fmt.Sprintf("network %s", n.Name))
	}
	return out, nil
}
