package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/registrytest"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/runtime"
)

// noDockerConfig points the docker client configuration at an empty
// directory, so a test sees no credentials of the machine's user.
func noDockerConfig(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
}

// A missing image is pulled from the loopback registry when the run is
// prepared, with a progress line naming its layers and bytes, and a sandbox
// then runs on what the pull brought.
func TestPrepareMissingImagePullsIt(t *testing.T) {
	noDockerConfig(t)
	reg := registrytest.Get(t)
	cli := engine(t)
	ref, marker := registrytest.PushUnique(t, cli, reg.Open, "pull", "")
	_, err := cli.ImageInspect(t.Context(), ref)
	require.Error(t, err, "the pushed image is gone from the engine before the test pulls it")

	p := open(t, nil)
	var progress bytes.Buffer
	require.NoError(t, p.Prepare(t.Context(), []providers.Spec{{Image: ref}, {Image: ref}}, &progress))
	out := progress.String()
	require.Contains(t, out, "docker: pulled "+ref+": ", out)
	require.Regexp(t, `pulled \S+: [1-9] of [1-9] layers, [0-9.]+ (B|kB|MB) of [0-9.]+ (B|kB|MB) in `, out)
	require.Contains(t, out, "1 images ready", "the two specs name one image")
	require.Equal(t, ImageStats{Pulled: 1}, p.ImageStats())

	sb, err := p.Create(t.Context(), providers.Spec{Image: ref})
	require.NoError(t, err)
	defer sb.Close(context.Background())
	require.Equal(t, marker+"\n", sh(t, sb, "cat /forkline-marker").Text())

	// Present now: a second provider pulls nothing.
	q := open(t, nil)
	progress.Reset()
	require.NoError(t, q.Prepare(t.Context(), []providers.Spec{{Image: ref}}, &progress))
	require.Equal(t, ImageStats{Present: 1}, q.ImageStats())
	require.NotContains(t, progress.String(), "docker: pulled")
}

// The registry behind htpasswd: the credentials come from the docker
// client's configuration (auths, or a credential helper); wrong ones fail
// at once, naming where they came from, never what they are.
func TestPullWithCredentials(t *testing.T) {
	reg := registrytest.Get(t)
	cli := engine(t)
	ref, marker := registrytest.PushUnique(t, cli, reg.Auth, "auth", registrytest.AuthHeader(reg.Auth, reg.User, reg.Password))

	t.Run("wrong password in auths", func(t *testing.T) {
		const wrong = "not-the-password-1234"
		t.Setenv("DOCKER_CONFIG", registrytest.ConfigWithAuth(t, reg.Auth, reg.User, wrong))
		p := open(t, nil)
		var progress bytes.Buffer
		began := time.Now()
		err := p.Prepare(t.Context(), []providers.Spec{{Image: ref}}, &progress)
		require.ErrorIs(t, err, providers.ErrCannotPrepare)
		require.ErrorIs(t, err, ErrImageMissing)
		msg := err.Error()
		require.Contains(t, msg, "with the credentials from "+filepath.Join(os.Getenv("DOCKER_CONFIG"), "config.json")+" auths["+reg.Auth+"]")
		require.Contains(t, strings.ToLower(msg), "unauthorized")
		for _, secret := range []string{wrong, base64.StdEncoding.EncodeToString([]byte(reg.User + ":" + wrong))} {
			require.NotContains(t, msg, secret, "no credential in the error")
			require.NotContains(t, progress.String(), secret, "no credential in the progress")
		}
		require.NotContains(t, progress.String(), "attempt", "a refused credential is not retried")
		require.Less(t, time.Since(began), 20*time.Second, "no backoff for an answer that will not change")
	})

	t.Run("no credentials", func(t *testing.T) {
		noDockerConfig(t)
		p := open(t, nil)
		err := p.Prepare(t.Context(), []providers.Spec{{Image: ref}}, nil)
		require.ErrorIs(t, err, providers.ErrCannotPrepare)
		require.Contains(t, err.Error(), "anonymously")
	})

	t.Run("auths", func(t *testing.T) {
		t.Setenv("DOCKER_CONFIG", registrytest.ConfigWithAuth(t, reg.Auth, reg.User, reg.Password))
		p := open(t, nil)
		require.NoError(t, p.Prepare(t.Context(), []providers.Spec{{Image: ref}}, nil))
		require.Equal(t, 1, p.ImageStats().Pulled)
		sb, err := p.Create(t.Context(), providers.Spec{Image: ref})
		require.NoError(t, err)
		defer sb.Close(context.Background())
		require.Equal(t, marker+"\n", sh(t, sb, "cat /forkline-marker").Text())
		registrytest.Remove(t, cli, ref)
	})

	t.Run("credential helper", func(t *testing.T) {
		// A real helper by the protocol: the server on stdin, JSON out.
		bin := t.TempDir()
		script := "#!/bin/sh\nread server\n[ \"$1\" = get ] || exit 2\n" +
			"if [ \"$server\" = \"" + reg.Auth + "\" ]; then printf '{\"ServerURL\":\"%s\",\"Username\":\"" + reg.User + "\",\"Secret\":\"" + reg.Password + "\"}' \"$server\"; exit 0; fi\n" +
			"echo 'credentials not found in native keychain'; exit 1\n"
		require.NoError(t, os.WriteFile(filepath.Join(bin, "docker-credential-forklinetest"), []byte(script), 0o755))
		t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		cfg := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"credHelpers":{"`+reg.Auth+`":"forklinetest"}}`), 0o600))
		t.Setenv("DOCKER_CONFIG", cfg)
		p := open(t, nil)
		require.NoError(t, p.Prepare(t.Context(), []providers.Spec{{Image: ref}}, nil))
		require.Equal(t, 1, p.ImageStats().Pulled)
	})
}

// A registry that refuses connections is a failure that may pass: the pull
// is tried again with backoff, then fails naming the attempts.
func TestPullRetriesWhatMayPass(t *testing.T) {
	noDockerConfig(t)
	engine(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	p := open(t, nil)
	p.pullAttempts, p.pullBackoff = 3, 10*time.Millisecond
	var progress bytes.Buffer
	err = p.Prepare(t.Context(), []providers.Spec{{Image: addr + "/forkline-test/none:1"}}, &progress)
	require.ErrorIs(t, err, providers.ErrCannotPrepare)
	require.Contains(t, err.Error(), "after 3 attempts")
	require.Contains(t, progress.String(), "attempt 1 of 3 failed")
	require.Contains(t, progress.String(), "attempt 2 of 3 failed")
}

func TestPullParam(t *testing.T) {
	noDockerConfig(t)
	engine(t)
	p := open(t, map[string]string{ParamPull: PullNever})
	err := p.Prepare(t.Context(), []providers.Spec{{Image: "127.0.0.1:1/forkline-test/absent:1"}}, nil)
	require.ErrorIs(t, err, ErrImageMissing)
	require.Contains(t, err.Error(), "pull=never forbids pulling it")
	_, err = p.Create(t.Context(), providers.Spec{Image: "127.0.0.1:1/forkline-test/absent:1"})
	require.ErrorIs(t, err, ErrImageMissing, "Create gets a missing image as Prepare does")

	// forkline's own images are never pulled, whatever pull says.
	q := open(t, map[string]string{ParamPull: PullAlways})
	require.NoError(t, q.Prepare(t.Context(), []providers.Spec{{Image: ImageBusybox}}, nil))
	require.Equal(t, ImageStats{Present: 1}, q.ImageStats())

	_, err = New(t.Context(), providers.Options{Params: map[string]string{ParamPull: "sometimes"}})
	require.ErrorContains(t, err, `param pull="sometimes" (known: always, missing, never)`)
}

// writeContext writes a build context: files by name.
func writeContext(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

// removeBuilt removes the built images of tags when t ends.
func removeBuilt(t *testing.T, cli *client.Client, tags ...string) {
	t.Cleanup(func() {
		for _, tag := range tags {
			registrytest.Remove(t, cli, tag)
		}
	})
}

// Builds FROM forkline's own base image with COPY, RUN, ARG and WORKDIR:
// tasks sharing one context (in two places) build it once; a second run
// builds nothing; a changed argument is another image.
func TestBuildOncePerContent(t *testing.T) {
	cli := engine(t)
	files := map[string]string{
		"Dockerfile": "FROM forkline/busybox\nARG GREETING=hello\nCOPY data/ /app/data/\nRUN echo \"$GREETING\" > /app/greeting && wc -l < /app/data/lines > /app/count\nWORKDIR /app\n",
		"data/lines": "a\nb\nc\n",
	}
	ctxA, ctxB := writeContext(t, files), writeContext(t, files)
	buildA := providers.Build{Context: ctxA, Args: map[string]string{"GREETING": "bonjour"}}
	buildB := providers.Build{Context: ctxB, Args: map[string]string{"GREETING": "bonjour"}}
	tagA, err := BuildTag(buildA)
	require.NoError(t, err)
	tagB, err := BuildTag(buildB)
	require.NoError(t, err)
	require.Equal(t, tagA, tagB, "the tag is the content's, not the path's")
	other := buildA
	other.Args = map[string]string{"GREETING": "hola"}
	tagOther, err := BuildTag(other)
	require.NoError(t, err)
	require.NotEqual(t, tagA, tagOther, "a build argument is part of the tag")
	removeBuilt(t, cli, tagA, tagOther)
	registrytest.Remove(t, cli, tagA) // a leftover of an earlier run would hide the build

	p := open(t, nil)
	var progress bytes.Buffer
	specs := []providers.Spec{{Build: &buildA}, {Build: &buildB}, {Build: &buildA}}
	require.NoError(t, p.Prepare(t.Context(), specs, &progress))
	require.Equal(t, ImageStats{Built: 1}, p.ImageStats(), progress.String())
	require.Regexp(t, `Step 3/\d+ : COPY data/ /app/data/`, progress.String())
	require.Contains(t, progress.String(), "1 built, 0 pulled, 0 already on the engine")

	sb, err := p.Create(t.Context(), providers.Spec{Build: &buildB})
	require.NoError(t, err)
	defer sb.Close(context.Background())
	require.Equal(t, "/app", sb.Info().Workspace, "the workspace is the image's WORKDIR")
	require.Equal(t, "bonjour\n", sh(t, sb, "cat greeting").Text(), "commands start in /app; the build argument reached RUN")
	require.Equal(t, "3\n", sh(t, sb, "cat count").Text())
	obs, err := sb.Act(t.Context(), runtime.Action{Kind: runtime.ActReadFile, Path: "data/lines"})
	require.NoError(t, err)
	require.Equal(t, "a\nb\nc\n", obs.Text(), "file actions are relative to the WORKDIR")
	obs, err = sb.Act(t.Context(), runtime.Action{Kind: runtime.ActWriteFile, Path: "/app/new.txt", Content: "x"})
	require.NoError(t, err)
	require.False(t, obs.Error, obs.Text())
	obs, err = sb.Act(t.Context(), runtime.Action{Kind: runtime.ActWriteFile, Path: "/workspace/x", Content: "x"})
	require.NoError(t, err)
	require.Equal(t, runtime.ErrPathRefused, obs.ErrorKind, "outside the workspace is refused as before")

	// A second run: nothing is built.
	q := open(t, nil)
	progress.Reset()
	require.NoError(t, q.Prepare(t.Context(), specs, &progress))
	require.Equal(t, ImageStats{Present: 1}, q.ImageStats())
	require.NotContains(t, progress.String(), "Step ")

	// Without Prepare, Create builds on demand.
	r := open(t, nil)
	sb2, err := r.Create(t.Context(), providers.Spec{Build: &other})
	require.NoError(t, err)
	defer sb2.Close(context.Background())
	require.Equal(t, "hola\n", sh(t, sb2, "cat greeting").Text())
	require.Equal(t, ImageStats{Built: 1}, r.ImageStats())
}

// A failing build is an error that names the step, the engine's message
// and the log, which holds the build's whole output.
func TestBuildFailureNamesTheStep(t *testing.T) {
	cli := engine(t)
	ctxDir := writeContext(t, map[string]string{"Dockerfile": "FROM forkline/busybox\nRUN echo building\nRUN echo about to fail && exit 3\nRUN echo never\n"})
	b := providers.Build{Context: ctxDir}
	tag, err := BuildTag(b)
	require.NoError(t, err)
	removeBuilt(t, cli, tag)
	p := newProvider(t, nil)
	p.dir = t.TempDir()
	t.Cleanup(func() { p.Close(context.Background()) })
	err = p.Prepare(t.Context(), []providers.Spec{{Build: &b}}, nil)
	require.ErrorIs(t, err, providers.ErrCannotPrepare)
	msg := err.Error()
	require.Regexp(t, `failed at Step 3/\d+ : RUN echo about to fail && exit 3`, msg)
	require.Contains(t, msg, "returned a non-zero code: 3")
	logPath := filepath.Join(p.dir, "forkline-build-"+strings.TrimPrefix(tag, BuildRepository+":")+".log")
	require.Contains(t, msg, "log: "+logPath)
	log, err := os.ReadFile(logPath)
	require.NoError(t, err)
	require.Contains(t, string(log), "about to fail")
	_, err = cli.ImageInspect(t.Context(), tag)
	require.Error(t, err, "a failed build tags nothing")

	// A .dockerignore would be ignored by the engine: refused.
	ign := writeContext(t, map[string]string{"Dockerfile": "FROM forkline/busybox\n", ".dockerignore": "secret\n"})
	err = p.Prepare(t.Context(), []providers.Spec{{Build: &providers.Build{Context: ign}}}, nil)
	require.ErrorContains(t, err, ".dockerignore, which forkline does not apply")
}

func TestPrepareChecksNetworks(t *testing.T) {
	engine(t)
	p := open(t, nil)
	err := p.Prepare(t.Context(), []providers.Spec{{Resources: providers.Resources{Network: "forkline-test-no-such-network"}}}, nil)
	require.ErrorIs(t, err, providers.ErrCannotPrepare)
	require.Contains(t, err.Error(), `network "forkline-test-no-such-network" does not exist on the engine`)
	require.NoError(t, p.Prepare(t.Context(), []providers.Spec{{Resources: providers.Resources{Network: "none"}, SetupNetwork: "host"}}, nil))
}

// A golden set up on the host's network (it may fetch what it installs)
// forks into sandboxes without a network.
func TestSetupNetworkIsTheGoldensOnly(t *testing.T) {
	engine(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("package-bytes")) })}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(l)
	defer srv.Close()
	// busybox's static wget crashes resolving names; nc speaks HTTP/1.0 as well.
	host, port, _ := net.SplitHostPort(l.Addr().String())
	get := "printf 'GET /pkg HTTP/1.0\\r\\n\\r\\n' | nc -w 5 " + host + " " + port

	p := open(t, nil)
	golden, err := p.Create(t.Context(), providers.Spec{SetupNetwork: "host", Resources: providers.Resources{Network: "none"}})
	require.NoError(t, err)
	defer golden.Close(context.Background())
	obs := sh(t, golden, get+" > pkg && tail -c 13 pkg")
	require.Equal(t, 0, obs.ExitCode, obs.Text())
	require.Equal(t, "package-bytes", obs.Text(), "setup reaches the network it was given")
	cp, err := p.Checkpoint(t.Context(), golden, "golden")
	require.NoError(t, err)
	fork, err := p.Fork(t.Context(), cp)
	require.NoError(t, err)
	defer fork.Close(context.Background())
	require.Equal(t, "package-bytes", sh(t, fork, "tail -c 13 pkg").Text(), "what setup fetched is in the fork")
	obs = sh(t, fork, get)
	require.NotContains(t, obs.Text(), "package-bytes", "the fork has no network")
	require.NotEqual(t, 0, obs.ExitCode, "the fork has no network: %s", obs.Text())
}

// Upload places files anywhere in the container, with their modes.
func TestUpload(t *testing.T) {
	engine(t)
	p := open(t, nil)
	sb, err := p.Create(t.Context(), providers.Spec{})
	require.NoError(t, err)
	defer sb.Close(context.Background())
	up, ok := providers.AsSandbox[providers.Uploader](sb)
	require.True(t, ok)
	require.NoError(t, up.Upload(t.Context(), "/tests", []providers.File{
		{Path: "test.sh", Data: []byte("echo run\n"), Mode: 0o755},
		{Path: "fixtures/data.bin", Data: []byte{0, 1, 2, 255}},
	}))
	require.Equal(t, "-rwxr-xr-x 9\n-rw-r--r-- 4\n", sh(t, sb, "stat -c '%A %s' /tests/test.sh /tests/fixtures/data.bin | sed 's/ *$//'").Text())
	require.NoError(t, up.Upload(t.Context(), "", []providers.File{{Path: "sub/in-workspace.txt", Data: []byte("w")}}))
	require.Equal(t, "w", sh(t, sb, "cat /workspace/sub/in-workspace.txt").Text())
}

// A Dockerfile built FROM one of forkline's images that the engine lacks
// is refused before the engine is asked (it would try Docker Hub: "lookup
// registry-1.docker.io ... no such host"), saying which image to build and
// how, as a task's image: does.
func TestBuildFromAMissingOwnImageSaysWhichToBuild(t *testing.T) {
	engine(t)
	missing := ImageDebian + ":forkline-test-never-built"
	ctxDir := writeContext(t, map[string]string{"Dockerfile": "FROM " + missing + " AS base\nFROM base\nRUN true\n"})
	p := newProvider(t, nil)
	p.dir = t.TempDir()
	t.Cleanup(func() { p.Close(context.Background()) })
	err := p.Prepare(t.Context(), []providers.Spec{{Build: &providers.Build{Context: ctxDir}}}, nil)
	require.ErrorIs(t, err, ErrImageMissing)
	require.ErrorContains(t, err, "its Dockerfile builds FROM "+missing)
	require.ErrorContains(t, err, "build it with make images-debian (forkline images -image forkline/debian)")
	entries, _ := os.ReadDir(p.dir)
	require.Empty(t, entries, "no build was started (no build log)")
}

func TestFromImages(t *testing.T) {
	require.Equal(t, []string{"forkline/debian", "golang:1.26"}, fromImages(
		"# syntax is not read\nFROM --platform=linux/amd64 forkline/debian AS base\nARG V\nfrom golang:1.26 as build\nFROM base\nFROM $V\nFROM build\n"))
}

// A symlink in a build context goes to the engine as a link, never as the
// host file it names: the tar holds the link's text, and the engine
// resolves it inside the context, so COPY of a link to a host file copies
// nothing of the host (the build fails, or the image holds the link).
// Task folders come from third parties (issue: a Harbor task's files
// reached the sandbox through symlinks; the build context is the one place
// a link is kept, so this pins what the engine does with it).
func TestBuildContextSendsLinksNotTheirTargets(t *testing.T) {
	secretDir := t.TempDir()
	const secret = "HOST-SECRET-build-context"
	require.NoError(t, os.WriteFile(filepath.Join(secretDir, "shadow"), []byte(secret), 0o600))
	ctxDir := writeContext(t, map[string]string{"Dockerfile": "FROM forkline/busybox\nCOPY leak /leak\nCOPY dir/ /dir/\n", "dir/plain": "x"})
	require.NoError(t, os.Symlink(filepath.Join(secretDir, "shadow"), filepath.Join(ctxDir, "leak")))
	require.NoError(t, os.Symlink(filepath.Join(secretDir, "shadow"), filepath.Join(ctxDir, "dir", "leak")))

	var tarball bytes.Buffer
	require.NoError(t, writeContextTar(ctxDir, &tarball))
	require.NotContains(t, tarball.String(), secret)
	links := map[string]string{}
	tr := tar.NewReader(&tarball)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeSymlink {
			links[h.Name] = h.Linkname
		}
	}
	require.Equal(t, map[string]string{"leak": filepath.Join(secretDir, "shadow"), "dir/leak": filepath.Join(secretDir, "shadow")}, links)

	cli := engine(t)
	b := providers.Build{Context: ctxDir}
	tag, err := BuildTag(b)
	require.NoError(t, err)
	removeBuilt(t, cli, tag)
	p := open(t, nil)
	var progress bytes.Buffer
	if err := p.Prepare(t.Context(), []providers.Spec{{Build: &b}}, &progress); err != nil {
		require.NotContains(t, err.Error(), secret)
		t.Logf("the engine refused the link out of the context: %v", err)
		return
	}
	sb, err := p.Create(t.Context(), providers.Spec{Build: &b})
	require.NoError(t, err)
	defer sb.Close(context.Background())
	out := sh(t, sb, "cat /leak /dir/leak 2>&1; ls -l /leak /dir/leak").Text()
	require.NotContains(t, out, secret)
}
