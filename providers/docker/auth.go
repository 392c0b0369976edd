package docker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/registry"
)

// Registry credentials, found the way the docker CLI finds them, so a pull
// works with what `docker login` stored: the client configuration
// ($DOCKER_CONFIG/config.json, else ~/.docker/config.json), its
// credHelpers (per registry) and credsStore (for every registry), both run
// as docker-credential-NAME by the credential helper protocol, and its
// auths entries (base64 user:password, or an identity token). No
// credential is ever logged, recorded or put into an error: messages name
// only where the credential came from.

// dockerHubServer is how the docker CLI keys Docker Hub's credentials.
const dockerHubServer = "https://index.docker.io/v1/"

// clientConfig is the part of the docker client's config.json that holds
// credentials.
type clientConfig struct {
	Auths       map[string]configAuth `json:"auths"`
	CredsStore  string                `json:"credsStore"`
	CredHelpers map[string]string     `json:"credHelpers"`
}

type configAuth struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
}

// credentials are what a registry is sent, and where they came from.
type credentials struct {
	auth   registry.AuthConfig
	source string // e.g. "~/.docker/config.json auths", "docker-credential-pass"; "" for none
}

// header is the X-Registry-Auth value of c ("" when there are none).
func (c credentials) header() (string, error) {
	if c.source == "" {
		return "", nil
	}
	b, err := json.Marshal(c.auth)
	if err != nil {
		return "", err
	}
	return base64.URLEncoding.EncodeToString(b), nil
}

// configDir is the docker client's configuration directory.
func configDir() string {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".docker")
}

// registryHost is the registry a reference is pulled from, as the
// credential store keys it ("docker.io" images use Docker Hub's key).
func registryHost(ref string) (host, server string, err error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", "", fmt.Errorf("docker: %q is not an image reference: %w", ref, err)
	}
	host = reference.Domain(named)
	if host == "docker.io" {
		return host, dockerHubServer, nil
	}
	return host, host, nil
}

// credentialHelperTimeout bounds one run of a credential helper.
const credentialHelperTimeout = 30 * time.Second

// lookupCredentials finds the credentials for ref's registry. No
// configuration, or none for that registry, is no credentials (an
// anonymous pull); a configuration that cannot be read, or a helper that
// fails, is an error naming the file or helper.
func lookupCredentials(ctx context.Context, ref string) (credentials, error) {
	host, server, err := registryHost(ref)
	if err != nil {
		return credentials{}, err
	}
	dir := configDir()
	if dir == "" {
		return credentials{}, nil
	}
	file := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return credentials{}, nil
	}
	if err != nil {
		return credentials{}, fmt.Errorf("docker: reading the client configuration %s: %w", file, err)
	}
	var cfg clientConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return credentials{}, fmt.Errorf("docker: the client configuration %s is not valid JSON: %w", file, err)
	}
	if helper := cfg.CredHelpers[host]; helper != "" {
		return helperCredentials(ctx, helper, server)
	}
	if cfg.CredsStore != "" {
		c, err := helperCredentials(ctx, cfg.CredsStore, server)
		if err != nil || c.source != "" {
			return c, err
		}
		// Not in the store: the docker CLI falls back to the file's auths.
	}
	for _, key := range serverKeys(host, server) {
		a, ok := cfg.Auths[key]
		if !ok {
			continue
		}
		c := credentials{source: file + " auths[" + key + "]"}
		c.auth.ServerAddress = server
		c.auth.IdentityToken = a.IdentityToken
		c.auth.Username, c.auth.Password = a.Username, a.Password
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			user, pass, ok := strings.Cut(string(raw), ":")
			if err != nil || !ok {
				return credentials{}, fmt.Errorf("docker: %s: the auth of %s is not base64 of user:password", file, key)
			}
			c.auth.Username, c.auth.Password = user, pass
		}
		if c.auth.Username == "" && c.auth.Password == "" && c.auth.IdentityToken == "" {
			continue // an empty entry, as docker login leaves with a credsStore
		}
		return c, nil
	}
	return credentials{}, nil
}

// serverKeys are the spellings config.json's auths may key a registry by.
func serverKeys(host, server string) []string {
	if server == dockerHubServer {
		return []string{dockerHubServer, "index.docker.io", "docker.io", "https://index.docker.io", "registry-1.docker.io"}
	}
	return []string{host, "https://" + host, "http://" + host, "https://" + host + "/v1/", "https://" + host + "/v2/"}
}

// errHelperNotFound is the helper protocol's answer for a server it holds
// no credentials for.
const errHelperNotFound = "credentials not found in native keychain"

// helperCredentials runs docker-credential-NAME get for server, by the
// credential helper protocol: the server URL on stdin, a JSON object with
// Username and Secret on stdout ("<token>" as the username marks an
// identity token).
func helperCredentials(ctx context.Context, name, server string) (credentials, error) {
	bin := "docker-credential-" + name
	ctx, cancel := context.WithTimeout(ctx, credentialHelperTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "get")
	cmd.Stdin = strings.NewReader(server)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String() + " " + stderr.String())
		if strings.Contains(msg, errHelperNotFound) {
			return credentials{}, nil
		}
		// The helper's own message may hold anything; keep only its first
		// line, which by the protocol is its error.
		first, _, _ := strings.Cut(msg, "\n")
		return credentials{}, fmt.Errorf("docker: credential helper %s (from the client configuration) failed for %s: %v: %s", bin, server, err, first)
	}
	var got struct {
		Username string `json:"Username"`
		Secret   string `json:"Secret"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		return credentials{}, fmt.Errorf("docker: credential helper %s answered for %s with something that is not its JSON", bin, server)
	}
	c := credentials{source: bin}
	c.auth.ServerAddress = server
	if got.Username == "<token>" {
		c.auth.IdentityToken = got.Secret
	} else {
		c.auth.Username, c.auth.Password = got.Username, got.Secret
	}
	return c, nil
}
