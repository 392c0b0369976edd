// Package registrytest gives tests the two loopback container registries
// .ci/registry-up.sh starts (Debian's docker-registry: one open, one
// behind htpasswd) and pushes images of unique content to them, so a pull
// really downloads a layer. It skips (or, under FORKLINE_REQUIRE=registry,
// fails) a test when the registries do not answer.
//
// It knows the registries' addresses and test credentials and the Engine
// API's push; it knows nothing of forkline's providers or tasks. It pushes
// copies made from forkline/busybox under test names and removes only
// those, never forkline's own images.
package registrytest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"

	"github.com/forkline/forkline/internal/testenv"
)

// Component is the testenv name of the registries.
const Component = testenv.Registry

// Registries are the addresses and credentials .ci/registry-up.sh uses
// (the same environment variables move them).
type Registries struct {
	Open     string // host:port of the registry without authentication
	Auth     string // host:port of the registry behind htpasswd
	User     string
	Password string
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Get returns the registries, or ends t (skip, or fail when required) when
// they do not answer.
func Get(t testing.TB) Registries {
	t.Helper()
	r := Registries{
		Open:     env("FORKLINE_TEST_REGISTRY", "127.0.0.1:5710"),
		Auth:     env("FORKLINE_TEST_REGISTRY_AUTH", "127.0.0.1:5711"),
		User:     env("FORKLINE_TEST_REGISTRY_USER", "forkline"),
		Password: env("FORKLINE_TEST_REGISTRY_PASSWORD", "forkline-test-secret"),
	}
	hc := &http.Client{Timeout: 3 * time.Second}
	testenv.Need(t, Component, func() error {
		for addr, want := range map[string]int{r.Open: http.StatusOK, r.Auth: http.StatusUnauthorized} {
			resp, err := hc.Get("http://" + addr + "/v2/")
			if err != nil {
				return fmt.Errorf("no registry answers on %s: %v", addr, err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				return fmt.Errorf("the registry on %s answers %d to /v2/, want %d", addr, resp.StatusCode, want)
			}
		}
		return nil
	})
	return r
}

// AuthHeader is the X-Registry-Auth value of user and password for addr.
func AuthHeader(addr, user, password string) string {
	b, _ := json.Marshal(registry.AuthConfig{Username: user, Password: password, ServerAddress: addr})
	return base64.URLEncoding.EncodeToString(b)
}

// ConfigWithAuth writes a docker client configuration directory holding
// auths for addr and returns it (for DOCKER_CONFIG).
func ConfigWithAuth(t testing.TB, addr, user, password string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := map[string]any{"auths": map[string]any{addr: map[string]string{
		"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + password)),
	}}}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(dir+"/config.json", b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// PushUnique builds an image of unique content FROM forkline/busybox (a
// layer holding /forkline-marker with a random value), pushes it to addr as
// forkline-test/NAME:TAG (with auth, an X-Registry-Auth value, for the
// registry behind htpasswd), removes it from the engine again and returns
// its reference and the marker. A pull of the reference then downloads
// the layer. The pulled image is removed when t ends.
func PushUnique(t testing.TB, cli *client.Client, addr, name, auth string) (ref, marker string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var b [8]byte
	_, _ = rand.Read(b[:])
	marker = hex.EncodeToString(b[:])
	ref = fmt.Sprintf("%s/forkline-test/%s:%s", addr, name, marker)

	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	df := "FROM forkline/busybox\nRUN echo " + marker + " > /forkline-marker\n"
	_ = tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(df))})
	_, _ = tw.Write([]byte(df))
	_ = tw.Close()
	res, err := cli.ImageBuild(ctx, &ctxTar, client.ImageBuildOptions{Tags: []string{ref}, Remove: true, ForceRemove: true,
		Version: build.BuilderV1, NetworkMode: "none"})
	if err != nil {
		t.Fatalf("registrytest: building %s: %v", ref, err)
	}
	if err := drain(res.Body); err != nil {
		t.Fatalf("registrytest: building %s: %v", ref, err)
	}
	if auth == "" {
		// The engine wants the header even for a registry without
		// authentication: an empty credential.
		auth = AuthHeader("", "", "")
	}
	push, err := cli.ImagePush(ctx, ref, client.ImagePushOptions{RegistryAuth: auth})
	if err != nil {
		t.Fatalf("registrytest: pushing %s: %v", ref, err)
	}
	if err := drain(push); err != nil {
		t.Fatalf("registrytest: pushing %s: %v", ref, err)
	}
	Remove(t, cli, ref)
	t.Cleanup(func() { Remove(t, cli, ref) })
	return ref, marker
}

// Remove removes ref from the engine, and the layers only it held; an
// image already gone is fine.
func Remove(t testing.TB, cli *client.Client, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil &&
		!strings.Contains(strings.ToLower(err.Error()), "no such image") {
		t.Errorf("registrytest: removing %s: %v", ref, err)
	}
}

// drain reads an engine progress stream to its end and returns the first
// error it reports.
func drain(r io.ReadCloser) error {
	defer r.Close()
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return fmt.Errorf("%s", m.Error)
		}
	}
}
