package browser

import (
	"net"
	"net/url"
	"path"
	"regexp"
	"strings"

	"github.com/forkline/forkline/providers"
)

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// resolveURL turns navigate's url into the URL Chromium loads, with ws the
// workspace's absolute path as Chromium sees it. refused is why the URL may
// not be loaded, or "" when it may.
func resolveURL(raw, ws string) (u, refused string) {
	const only = "the browser may open workspace files, loopback http(s) URLs, about:blank and data: URLs only"
	if strings.TrimSpace(raw) == "" {
		return "", "empty url"
	}
	if !schemeRE.MatchString(raw) {
		// A workspace-relative path, with an optional query and fragment.
		p, rest := raw, ""
		if i := strings.IndexAny(raw, "?#"); i >= 0 {
			p, rest = raw[:i], raw[i:]
		}
		if p == "" {
			p = "."
		}
		if path.IsAbs(p) {
			return "", "an absolute path is not in the workspace; give a workspace-relative path"
		}
		rel, err := providers.ResolvePath(p)
		if err != nil {
			return "", "the path leaves the workspace"
		}
		return fileURL(path.Join(ws, rel)) + rest, ""
	}
	pu, err := url.Parse(raw)
	if err != nil {
		return "", "not a URL: " + err.Error()
	}
	switch strings.ToLower(pu.Scheme) {
	case "about":
		if raw == "about:blank" {
			return raw, ""
		}
	case "data":
		return raw, ""
	case "file":
		if pu.Host != "" && pu.Host != "localhost" {
			return "", "a file URL with a host is not in the workspace"
		}
		clean := path.Clean(pu.Path)
		if clean != ws && !strings.HasPrefix(clean, strings.TrimSuffix(ws, "/")+"/") {
			return "", "the file is outside the workspace; " + only
		}
		return raw, ""
	case "http", "https":
		if isLoopback(pu.Hostname()) {
			return raw, ""
		}
		return "", "the host " + pu.Hostname() + " is not loopback; " + only
	}
	return "", "scheme " + pu.Scheme + " is not allowed; " + only
}

// isLoopback reports whether host is one of the loopback names the resolver
// rules let through: localhost, 127.0.0.1 or ::1.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback))
}

// fileURL is the file:// URL of an absolute path, escaped.
func fileURL(p string) string {
	return (&url.URL{Scheme: "file", Path: p}).String()
}

// displayURL shows a URL the way observations and page files do: a file inside
// the workspace as its workspace-relative path (with query and fragment), so
// the text does not depend on where a replica's workspace is; anything else
// unchanged.
func displayURL(u, ws string) string {
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "file" {
		return u
	}
	prefix := strings.TrimSuffix(ws, "/") + "/"
	rel, ok := strings.CutPrefix(pu.Path, prefix)
	if !ok {
		return u
	}
	out := (&url.URL{Path: rel}).String()
	if pu.RawQuery != "" {
		out += "?" + pu.RawQuery
	}
	if pu.Fragment != "" {
		out += "#" + pu.EscapedFragment()
	}
	return out
}

// hostResolverRules closes Chromium's network: every host and address fails
// to resolve except the loopback ones. The rules apply to IP literals too.
const hostResolverRules = "MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1, EXCLUDE [::1]"
