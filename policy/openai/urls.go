package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// serverURLs are the roots a server's endpoints hang from. vLLM and SGLang
// serve the OpenAI API under /v1 (chat completions, completions, models,
// the render and derender routes) and their own routes at the server's root
// (/tokenize, /detokenize, /inference/v1/generate, SGLang's /generate,
// llama.cpp's /props).
type serverURLs struct {
	apiRoot    string // the OpenAI API root, e.g. http://host:8000/v1
	serverRoot string // the server root, e.g. http://host:8000
	query      string // kept on every URL (e.g. Azure's ?api-version=...)
	host       string // scheme://host[:port], whom the API key is for
}

// api is the URL of an OpenAI API route (path after /v1).
func (u serverURLs) api(path string) string { return u.apiRoot + path + u.query }

// root is the URL of a route at the server's root.
func (u serverURLs) root(path string) string { return u.serverRoot + path + u.query }

// parseServerURL reads a base URL (http(s), with a host, with or without
// the /chat/completions suffix) into its roots. It refuses credentials in
// the URL: they would be recorded with the options.
func parseServerURL(base, option string) (serverURLs, error) {
	if base == "" {
		return serverURLs{}, fmt.Errorf("%s is required (e.g. http://127.0.0.1:8000/v1)", option)
	}
	u, err := url.Parse(base)
	if err != nil {
		return serverURLs{}, fmt.Errorf("%s: %v", option, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return serverURLs{}, fmt.Errorf("%s %q: want an http or https URL", option, base)
	}
	if u.Host == "" {
		return serverURLs{}, fmt.Errorf("%s %q has no host", option, base)
	}
	if u.User != nil {
		return serverURLs{}, fmt.Errorf("%s carries credentials; put the key in the environment variable named by api_key_env instead", option)
	}
	if u.Fragment != "" {
		return serverURLs{}, fmt.Errorf("%s %q has a fragment", option, base)
	}
	p := strings.TrimRight(u.Path, "/")
	p = strings.TrimSuffix(p, "/chat/completions")
	host := u.Scheme + "://" + u.Host
	root := strings.TrimSuffix(p, "/v1")
	q := ""
	if u.RawQuery != "" {
		q = "?" + u.RawQuery
	}
	return serverURLs{apiRoot: host + p, serverRoot: host + root, query: q, host: host}, nil
}

// sameHost reports whether rawURL is on host (scheme://host[:port]).
func sameHost(rawURL, host string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Scheme+"://"+u.Host == host
}

// pathOf is a URL's path, as provenance records an endpoint.
func pathOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	return u.Path
}

// marshalNoEscape encodes v without HTML escaping, as Python's json.dumps
// does: tool descriptions and observations holding < > & reach the server as
// written.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
