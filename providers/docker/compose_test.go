package docker

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/providers"
)

// kvService is a key-value service on port 7000 built from busybox alone:
// one line per connection, GET answers the value, SET N stores it.
func kvService(name string) providers.Service {
	script := `mkdir -p /data; [ -f /data/v ] || echo 0 > /data/v
cat > /kv.sh <<'EOS'
read -r op arg
case "$op" in
GET) cat /data/v ;;
SET) echo "$arg" > /data/v && echo OK ;;
esac
EOS
exec nc -ll -p 7000 -e sh /kv.sh`
	return providers.Service{
		Name: name, Image: ImageBusybox, Command: []string{"sh", "-c", script},
		Health: &providers.Health{Test: []string{"CMD-SHELL", "echo GET | nc 127.0.0.1 7000 | grep -q ."}, Interval: 200 * time.Millisecond, Timeout: 5 * time.Second, Retries: 100},
	}
}

// composeSpec is a sandbox with a kv service and a second service that may
// start only once kv is healthy, and records what kv held then.
func composeSpec() providers.Spec {
	return providers.Spec{Services: []providers.Service{
		kvService("kv"),
		{Name: "audit", Image: ImageBusybox, DependsOn: map[string]string{"kv": providers.ConditionHealthy},
			Command: []string{"sh", "-c", "[ -f /seen ] || echo GET | nc kv 7000 > /seen; exec nc -ll -p 7001 -e cat /seen"}},
	}}
}

func kvGet(t *testing.T, sb providers.Sandbox) string {
	t.Helper()
	obs := sh(t, sb, "echo GET | nc kv 7000")
	require.Equal(t, 0, obs.ExitCode, string(obs.Output))
	return strings.TrimSpace(string(obs.Output))
}

func kvSet(t *testing.T, sb providers.Sandbox, v string) {
	t.Helper()
	obs := sh(t, sb, "echo 'SET "+v+"' | nc kv 7000")
	require.Equal(t, "OK", strings.TrimSpace(string(obs.Output)))
}

// The containers of a sandbox's environment, by service name ("" for the
// sandbox itself), and their networks.
func envContainers(t *testing.T, p *Provider, sb providers.Sandbox) map[string]containerView {
	t.Helper()
	s := sb.(*sandbox)
	out := map[string]containerView{"": inspectView(t, p, s.id)}
	for _, c := range s.env.containers {
		out[c.name] = inspectView(t, p, c.id)
	}
	return out
}

type containerView struct {
	labels   map[string]string
	networks []string
	capDrop  []string
	memory   int64
	pids     int64
}

func inspectView(t *testing.T, p *Provider, id string) containerView {
	ins, err := p.cli.ContainerInspect(t.Context(), id, client.ContainerInspectOptions{})
	require.NoError(t, err)
	v := containerView{labels: ins.Container.Config.Labels, capDrop: ins.Container.HostConfig.CapDrop, memory: ins.Container.HostConfig.Memory}
	if ins.Container.HostConfig.PidsLimit != nil {
		v.pids = *ins.Container.HostConfig.PidsLimit
	}
	for n := range ins.Container.NetworkSettings.Networks {
		v.networks = append(v.networks, n)
	}
	return v
}

// A compose environment on docker: services start in depends_on order once
// healthy, reach each other and the sandbox by name on a network of the
// sandbox's own; a checkpoint holds every service's files, every fork gets
// services of its own; a checkpoint taken mid-episode holds the fork's
// services as they are; every container is bounded and labelled; nothing
// is left.
func TestComposeEnvironment(t *testing.T) {
	p := open(t, nil)
	ctx := t.Context()
	require.True(t, p.Capabilities().Services)
	golden, err := p.Create(ctx, composeSpec())
	require.NoError(t, err)
	require.Equal(t, "0", kvGet(t, golden))
	require.Equal(t, "0", strings.TrimSpace(string(sh(t, golden, "nc audit 7001").Output)), "audit started after kv was healthy")
	kvSet(t, golden, "7") // setup's change to a service
	cs := envContainers(t, p, golden)
	require.Len(t, cs, 3)
	net := cs[""].networks
	require.Len(t, net, 1)
	for name, c := range cs {
		require.Equal(t, net, c.networks, "%q is on the sandbox's network", name)
		require.Equal(t, p.RunID(), c.labels[LabelRun], name)
		require.Equal(t, []string{"ALL"}, c.capDrop, name)
		require.Equal(t, int64(DefaultMemoryMB)<<20, c.memory, name)
		require.Equal(t, int64(DefaultPids), c.pids, name)
	}
	nw, err := p.cli.NetworkInspect(ctx, net[0], client.NetworkInspectOptions{})
	require.NoError(t, err)
	require.True(t, nw.Network.Internal, "no route out of the environment")
	require.Equal(t, p.RunID(), nw.Network.Labels[LabelRun])
	obs := sh(t, golden, "nc -w 2 kv 7000 </dev/null; echo GET | nc -w 2 main 7000 2>&1; hostname")
	require.NotContains(t, string(obs.Output), "bad address", "main resolves")

	cp, err := p.Checkpoint(ctx, golden, "golden")
	require.NoError(t, err)
	a, err := p.Fork(ctx, cp)
	require.NoError(t, err)
	b, err := p.Fork(ctx, cp)
	require.NoError(t, err)
	require.Equal(t, "7", kvGet(t, a), "a fork's service holds the golden's state")
	kvSet(t, a, "100")
	require.Equal(t, "7", kvGet(t, b), "a write in one fork's service is invisible in another's")
	require.Equal(t, "100", kvGet(t, a))
	require.Equal(t, "7", kvGet(t, golden))
	na, nb := envContainers(t, p, a)[""].networks, envContainers(t, p, b)[""].networks
	require.NotEqual(t, na, nb, "every fork has a network of its own")
	require.NotEqual(t, net, na)

	// A checkpoint in the middle of an episode commits every service.
	mid, err := p.Checkpoint(ctx, a, "step-3")
	require.NoError(t, err)
	c, err := p.Fork(ctx, mid)
	require.NoError(t, err)
	require.Equal(t, "100", kvGet(t, c))
	require.Equal(t, "0", strings.TrimSpace(string(sh(t, c, "nc audit 7001").Output)), "audit's files are the checkpoint's: what it saw when the golden started, not what kv holds now")

	// Closing a sandbox removes its services and its network.
	require.NoError(t, c.Close(ctx))
	left, err := listLabelled(ctx, p.cli, LabelCheckpoint+"="+mid.ID)
	require.NoError(t, err)
	require.Empty(t, left)
	require.NoError(t, p.Release(ctx, mid))
}

// A service that never gets healthy, and one whose image is not on the
// engine, fail Create (and Prepare) naming the service, and leave nothing.
func TestComposeFailuresLeaveNothing(t *testing.T) {
	p := open(t, map[string]string{ParamPull: PullNever})
	ctx := t.Context()
	sick := providers.Service{Name: "db", Image: ImageBusybox, Command: []string{"sleep", "600"},
		Health: &providers.Health{Test: []string{"CMD", "false"}, Interval: 100 * time.Millisecond, Timeout: time.Second, Retries: 2}}
	_, err := p.Create(ctx, providers.Spec{Services: []providers.Service{sick}})
	require.ErrorIs(t, err, providers.ErrCannotPrepare)
	require.ErrorContains(t, err, "service db is unhealthy")
	dies := providers.Service{Name: "web", Image: ImageBusybox, Command: []string{"sh", "-c", "echo no config; exit 3"},
		Health: &providers.Health{Test: []string{"CMD", "true"}, Interval: time.Second, Retries: 3}}
	_, err = p.Create(ctx, providers.Spec{Services: []providers.Service{dies}})
	require.ErrorContains(t, err, "service web exited (code 3)")
	require.ErrorContains(t, err, "no config")

	missing := providers.Service{Name: "cache", Image: "forkline/no-such-image:" + randomHex(4)}
	err = p.Prepare(ctx, []providers.Spec{{Services: []providers.Service{missing}}}, nil)
	require.ErrorIs(t, err, providers.ErrCannotPrepare)
	require.ErrorContains(t, err, missing.Image)
	_, err = p.Create(ctx, providers.Spec{Services: []providers.Service{missing}})
	require.ErrorContains(t, err, "service cache")

	left, err := listLabelled(ctx, p.cli, LabelInstance+"="+p.instance)
	require.NoError(t, err)
	require.Empty(t, left, "a failed Create leaves no container or network")
}

// What a killed run left of a compose environment — its services'
// containers, its network, its checkpoint images — is swept.
func TestComposeSweep(t *testing.T) {
	p := newProvider(t, nil)
	ctx := t.Context()
	sb, err := p.Create(ctx, composeSpec())
	require.NoError(t, err)
	_, err = p.Checkpoint(ctx, sb, "golden")
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Sweep(cctx, p.cli, SweepOptions{RunID: p.RunID()})
	require.NoError(t, err)
	require.Len(t, res.Containers, 3)
	require.Len(t, res.Networks, 1)
	require.Len(t, res.Images, 3)
	left, err := listLabelled(cctx, p.cli, LabelRun+"="+p.RunID())
	require.NoError(t, err)
	require.Empty(t, left)
	require.NoError(t, p.Close(cctx))
}

// Spec validation refuses Services no environment could run.
func TestServicesValidate(t *testing.T) {
	for _, c := range []struct {
		spec providers.Spec
		want string
	}{
		{providers.Spec{Services: []providers.Service{{Name: "main", Image: "x"}}}, `name "main" is not allowed`},
		{providers.Spec{Services: []providers.Service{{Name: "a"}}}, "a has no image"},
		{providers.Spec{Services: []providers.Service{{Name: "a", Image: "x", DependsOn: map[string]string{"b": providers.ConditionStarted}}, {Name: "b", Image: "x"}}}, "depends on b, which is not a service listed before it"},
		{providers.Spec{Resources: providers.Resources{Network: "bridge"}, Services: []providers.Service{{Name: "a", Image: "x"}}}, `Resources.Network "bridge" is not allowed`},
	} {
		require.ErrorContains(t, c.spec.Validate(), c.want)
	}
	require.ErrorContains(t, providers.RefuseServices("local", composeSpec()), "local: providers: not supported by this provider: a multi-container environment (services kv, audit) runs on the docker provider")
}

// A service built from a Dockerfile and given a copy of host files: the
// build is made once (a second Create builds nothing), the copy is in the
// golden's service before it starts (files, folders, modes, links as
// links), a fork's service holds the golden's files — its own changes to
// the copy included — and the copy is never made again over them. An
// image that declares a VOLUME is refused, naming the service.
func TestComposeBuildAndCopies(t *testing.T) {
	p := open(t, nil)
	ctx := t.Context()
	bctx := t.TempDir()
	writeFile(t, filepath.Join(bctx, "Dockerfile"), "FROM "+ImageBusybox+"\nARG GREETING\nRUN echo \"$GREETING\" > /greeting\n")
	seed := t.TempDir()
	writeFile(t, filepath.Join(seed, "counter"), "41\n")
	writeFile(t, filepath.Join(seed, "sub", "run.sh"), "echo ran\n")
	require.NoError(t, os.Chmod(filepath.Join(seed, "sub", "run.sh"), 0o755))
	require.NoError(t, os.Symlink("counter", filepath.Join(seed, "link")))
	one := filepath.Join(t.TempDir(), "motd")
	writeFile(t, one, "hello\n")
	svc := providers.Service{
		Name: "svc", Build: &providers.Build{Context: bctx, Args: map[string]string{"GREETING": "hi"}},
		Copies: []providers.Copy{{Source: seed, Target: "/srv/seed"}, {Source: one, Target: "/etc/motd"}},
		// What the service saw at its first start, then a server of it.
		Command: []string{"sh", "-c", "[ -f /seen ] || cat /greeting /srv/seed/counter /srv/seed/link /etc/motd > /seen; /srv/seed/sub/run.sh >> /seen; exec nc -ll -p 7000 -e cat /seen"},
	}
	spec := providers.Spec{Services: []providers.Service{svc}}
	require.NoError(t, p.Prepare(ctx, []providers.Spec{spec}, nil))
	require.Equal(t, 1, p.ImageStats().Built)
	tag, err := BuildTag(*svc.Build)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = p.cli.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true}) })
	golden, err := p.Create(ctx, spec)
	require.NoError(t, err)
	require.Equal(t, 1, p.ImageStats().Built, "built once")
	seen := func(sb providers.Sandbox) string {
		return strings.TrimSpace(string(sh(t, sb, "nc svc 7000 </dev/null").Output))
	}
	require.Equal(t, "hi\n41\n41\nhello\nran", seen(golden))

	// The golden's service changes its copy; the fork's has the change.
	id := golden.(*sandbox).env.idOf("svc")
	ex, err := p.cli.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: []string{"sh", "-c", "echo 99 > /srv/seed/counter"}})
	require.NoError(t, err)
	_, err = p.cli.ExecStart(ctx, ex.ID, client.ExecStartOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := p.cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		return err == nil && !r.Running
	}, 10*time.Second, 50*time.Millisecond)
	cp, err := p.Checkpoint(ctx, golden, "golden")
	require.NoError(t, err)
	fork, err := p.Fork(ctx, cp)
	require.NoError(t, err)
	fid := fork.(*sandbox).env.idOf("svc")
	rc, err := p.cli.CopyFromContainer(ctx, fid, client.CopyFromContainerOptions{SourcePath: "/srv/seed/counter"})
	require.NoError(t, err)
	tr := tar.NewReader(rc.Content)
	_, err = tr.Next()
	require.NoError(t, err)
	b, err := io.ReadAll(tr)
	require.NoError(t, err)
	_ = rc.Content.Close()
	require.Equal(t, "99\n", string(b), "the fork's copy is the golden's, not the host's again")
	require.Equal(t, "hi\n41\n41\nhello\nran\nran", seen(fork), "the fork's service started from the golden's files")
	require.NoError(t, fork.Close(ctx))
	require.NoError(t, golden.Close(ctx))
	require.NoError(t, p.Release(ctx, cp))

	// An image with a VOLUME: its contents would not be committed.
	vctx := t.TempDir()
	writeFile(t, filepath.Join(vctx, "Dockerfile"), "FROM "+ImageBusybox+"\nVOLUME /var/lib/db\n")
	vol := providers.Service{Name: "db", Build: &providers.Build{Context: vctx}, Command: []string{"sleep", "600"}}
	vtag, err := BuildTag(*vol.Build)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = p.cli.ImageRemove(context.Background(), vtag, client.ImageRemoveOptions{Force: true}) })
	err = p.Prepare(ctx, []providers.Spec{{Services: []providers.Service{vol}}}, nil)
	require.ErrorIs(t, err, providers.ErrCannotPrepare)
	require.ErrorContains(t, err, "service db: its image "+vtag+" declares VOLUME /var/lib/db")
	_, err = p.Create(ctx, providers.Spec{Services: []providers.Service{vol}})
	require.ErrorContains(t, err, "declares VOLUME /var/lib/db")
	left, err := listLabelled(ctx, p.cli, LabelInstance+"="+p.instance)
	require.NoError(t, err)
	require.Empty(t, left)
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(name), 0o755))
	require.NoError(t, os.WriteFile(name, []byte(content), 0o644))
}
