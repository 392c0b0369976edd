package docker

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func writeConfig(t *testing.T, json string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(json), 0o600))
	t.Setenv("DOCKER_CONFIG", dir)
}

// helper installs docker-credential-NAME answering with body and exit code.
func helper(t *testing.T, name, body string, exit int) {
	t.Helper()
	bin := t.TempDir()
	script := "#!/bin/sh\ncat >/dev/null\nprintf '%s' '" + body + "'\nexit " + string(rune('0'+exit)) + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(bin, "docker-credential-"+name), []byte(script), 0o755))
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func TestLookupCredentials(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

	t.Run("no configuration is an anonymous pull", func(t *testing.T) {
		t.Setenv("DOCKER_CONFIG", t.TempDir())
		c, err := lookupCredentials(t.Context(), "registry.example:5000/a/b:1")
		require.NoError(t, err)
		require.Empty(t, c.source)
		h, err := c.header()
		require.NoError(t, err)
		require.Empty(t, h)
	})
	t.Run("auths by host, and Docker Hub by its legacy key", func(t *testing.T) {
		writeConfig(t, `{"auths":{"registry.example:5000":{"auth":"`+b64("ada:pw1")+`"},"https://index.docker.io/v1/":{"auth":"`+b64("bob:pw2")+`"}}}`)
		c, err := lookupCredentials(t.Context(), "registry.example:5000/a/b:1")
		require.NoError(t, err)
		require.Equal(t, []string{"ada", "pw1", "registry.example:5000"}, []string{c.auth.Username, c.auth.Password, c.auth.ServerAddress})
		c, err = lookupCredentials(t.Context(), "alexgshaw/some-task:20251031")
		require.NoError(t, err)
		require.Equal(t, []string{"bob", "pw2", dockerHubServer}, []string{c.auth.Username, c.auth.Password, c.auth.ServerAddress})
	})
	t.Run("a credential helper wins for its registry; an identity token", func(t *testing.T) {
		helper(t, "forklinetok", `{"ServerURL":"r.example","Username":"<token>","Secret":"tok-123"}`, 0)
		writeConfig(t, `{"auths":{"r.example":{"auth":"`+b64("ada:pw1")+`"}},"credHelpers":{"r.example":"forklinetok"}}`)
		c, err := lookupCredentials(t.Context(), "r.example/x:1")
		require.NoError(t, err)
		require.Equal(t, "docker-credential-forklinetok", c.source)
		require.Equal(t, "tok-123", c.auth.IdentityToken)
		require.Empty(t, c.auth.Username)
	})
	t.Run("a store without the server falls back to auths", func(t *testing.T) {
		helper(t, "forklineempty", "credentials not found in native keychain", 1)
		writeConfig(t, `{"auths":{"r.example":{"auth":"`+b64("ada:pw1")+`"}},"credsStore":"forklineempty"}`)
		c, err := lookupCredentials(t.Context(), "r.example/x:1")
		require.NoError(t, err)
		require.Equal(t, "ada", c.auth.Username)
	})
	t.Run("a failing helper is an error that names it, not the secret", func(t *testing.T) {
		helper(t, "forklinebroken", "keyring locked", 3)
		writeConfig(t, `{"credsStore":"forklinebroken"}`)
		_, err := lookupCredentials(t.Context(), "r.example/x:1")
		require.ErrorContains(t, err, "credential helper docker-credential-forklinebroken")
		require.ErrorContains(t, err, "keyring locked")
	})
	t.Run("a helper that is not installed", func(t *testing.T) {
		writeConfig(t, `{"credsStore":"forkline-not-installed"}`)
		_, err := lookupCredentials(t.Context(), "r.example/x:1")
		require.ErrorContains(t, err, "docker-credential-forkline-not-installed")
	})
	t.Run("a broken configuration names its file", func(t *testing.T) {
		writeConfig(t, `{"auths":`)
		_, err := lookupCredentials(t.Context(), "r.example/x:1")
		require.ErrorContains(t, err, "config.json is not valid JSON")
		writeConfig(t, `{"auths":{"r.example":{"auth":"not base64!"}}}`)
		_, err = lookupCredentials(t.Context(), "r.example/x:1")
		require.ErrorContains(t, err, "is not base64 of user:password")
		require.NotContains(t, err.Error(), "not base64!", "the stored value is not repeated")
	})
}

func TestTransientPullError(t *testing.T) {
	for msg, want := range map[string]bool{
		`Get "http://127.0.0.1:5799/v2/": dial tcp 127.0.0.1:5799: connect: connection refused`: true,
		`received unexpected HTTP status: 503 Service Unavailable`:                              true,
		`toomanyrequests: You have reached your pull rate limit`:                                true,
		`unauthorized: authentication required`:                                                 false,
		`pull access denied for x, repository does not exist or may require 'docker login'`:     false,
		`manifest for x:1 not found: manifest unknown`:                                          false,
		`Get "https://example.invalid/v2/": dial tcp: lookup example.invalid: no such host`:     false,
	} {
		require.Equal(t, want, transientPullError(errString(msg)), msg)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
