// Package testenv decides what a test does when an outside component it needs
// (a Docker engine, Chromium, mount privileges) is missing: skip with the
// reason on a developer's machine, fail under CI, where FORKLINE_REQUIRE names
// the components that must be present (restic's RESTIC_TEST_DISALLOW_SKIP
// habit). A green CI run therefore means the real thing ran.
//
// It knows nothing about how to find a component; callers probe and pass the
// reason. The components named so far:
//
//	overlay          overlayfs mounts for the local provider (root or a user namespace)
//	docker           a Docker engine with forkline's images (bash .ci/docker-up.sh)
//	chromium         Debian's Chromium (bash .ci/chromium-up.sh)
//	docker-chromium  the forkline/chromium image (make images-browser)
//	docker-debian    the forkline/debian image (make images-debian): Harbor tasks need bash
//	registry         two container registries on loopback, one open and one behind
//	                 htpasswd (bash .ci/registry-up.sh)
//	templates        the test oracle's real chat templates and tokenizers: Node.js with
//	                 internal/oracle/js/node_modules, and /usr/bin/python3 with Debian's
//	                 python3-jinja2 (bash .ci/oracle-up.sh)
//	slurm            Debian's slurm-wlm and munge, run as root: each test starts its own
//	                 one-node cluster on 127.0.0.1 (internal/slurmtest; bash .ci/slurm-up.sh)
//	gvisor           Debian's runsc (gVisor) running sandboxes as root: the gvisor provider
//	                 (bash .ci/gvisor-up.sh)
//	docker-runsc     a Docker engine with runsc registered as the runtime "runsc"
//	                 (-provider-opt runtime=runsc; bash .ci/docker-up.sh registers it when
//	                 it starts the engine)
package testenv

import (
	"os"
	"strings"
	"testing"
)

// Templates is the component name of the test oracle (internal/oracle): real
// chat templates and tokenizers, rendered by Python's Jinja2 and by
// @huggingface/jinja.
const Templates = "templates"

// RequireEnv is the environment variable listing required components,
// comma-separated (e.g. "docker,chromium,overlay"), or "all".
const RequireEnv = "FORKLINE_REQUIRE"

// Required reports whether component must be present in this run.
func Required(component string) bool {
	for _, c := range strings.Split(os.Getenv(RequireEnv), ",") {
		c = strings.TrimSpace(c)
		if c == component || c == "all" {
			return true
		}
	}
	return false
}

// Missing ends the test because component is unavailable: t.Skip with the
// reason, or t.Fatal when FORKLINE_REQUIRE names the component.
func Missing(t testing.TB, component, reason string) {
	t.Helper()
	if Required(component) {
		t.Fatalf("%s is required (%s=%s) but missing: %s", component, RequireEnv, os.Getenv(RequireEnv), reason)
	}
	t.Skipf("SKIP: %s missing: %s (set %s=%s to make this a failure)", component, reason, RequireEnv, component)
}
