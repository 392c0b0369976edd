package testenv

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test would have ended.
type recorder struct {
	testing.TB
	skipped, failed string
}

// stop ends the call the way Skipf and Fatalf end a test's goroutine.
type stop struct{}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	panic(stop{})
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(stop{})
}

// run calls f with a recorder and returns it.
func run(f func(t testing.TB)) (r *recorder) {
	r = &recorder{}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(stop); !ok {
				panic(v)
			}
		}
	}()
	f(r)
	return r
}

func TestNeedSkipsFailsOrPasses(t *testing.T) {
	probeFails := func() error { return errors.New("no engine answers") }
	for _, tc := range []struct {
		name, require, hide string
		probe               func() error
		skip, fail          []string // substrings; both nil: the test goes on
		probed              bool
	}{
		{name: "present", probe: func() error { return nil }, probed: true},
		{name: "missing", probe: probeFails, probed: true,
			skip: []string{"testenv: docker missing: no engine answers\n", "install: bash .ci/docker-up.sh", "FORKLINE_REQUIRE=docker turns this skip into a failure"}},
		{name: "missing but required", require: "chromium,docker", probe: probeFails, probed: true,
			fail: []string{"docker is required (FORKLINE_REQUIRE=chromium,docker) but missing: no engine answers", "install: bash .ci/docker-up.sh"}},
		{name: "hidden: not probed", hide: "docker", probe: probeFails,
			skip: []string{"testenv: docker missing: docker is hidden by FORKLINE_HIDE=docker\n"}},
		{name: "all hidden", hide: "all", probe: func() error { return nil },
			skip: []string{"testenv: docker missing: docker is hidden by FORKLINE_HIDE=all"}},
		{name: "another hidden", hide: "chromium", probe: func() error { return nil }, probed: true},
		{name: "hidden and required", hide: "all", require: "all", probe: func() error { return nil },
			fail: []string{"docker is required (FORKLINE_REQUIRE=all) but missing: docker is hidden"}},
		{name: "misspelt hide", hide: "dokcer", probe: func() error { return nil },
			fail: []string{"FORKLINE_HIDE=dokcer names dokcer, which is no component (known: all, overlay,"}},
		{name: "misspelt require", require: "docker, chromum", probe: probeFails,
			fail: []string{"FORKLINE_REQUIRE=docker, chromum names chromum"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(RequireEnv, tc.require)
			t.Setenv(HideEnv, tc.hide)
			probed := false
			r := run(func(tb testing.TB) {
				Need(tb, Docker, func() error { probed = true; return tc.probe() })
			})
			if probed != tc.probed {
				t.Errorf("probed %v, want %v", probed, tc.probed)
			}
			check := func(what, got string, want []string) {
				if want == nil && got != "" {
					t.Errorf("%s: %q, want none", what, got)
				}
				for _, w := range want {
					if !strings.Contains(got, w) {
						t.Errorf("%s: %q lacks %q", what, got, w)
					}
				}
			}
			check("skip", r.skipped, tc.skip)
			check("failure", r.failed, tc.fail)
		})
	}
}

func TestUnknownComponentFails(t *testing.T) {
	t.Setenv(RequireEnv, "")
	t.Setenv(HideEnv, "")
	r := run(func(tb testing.TB) { Missing(tb, "dockr", "x") })
	if !strings.Contains(r.failed, `testenv: unknown component "dockr" (known: overlay, cgroup, root, docker,`) {
		t.Errorf("failure %q", r.failed)
	}
}

func TestInapplicableSkipsWithItsMarker(t *testing.T) {
	r := run(func(tb testing.TB) { Inapplicable(tb, "provider p cannot checkpoint") })
	if r.skipped != "testenv: not applicable: provider p cannot checkpoint" {
		t.Errorf("skip %q", r.skipped)
	}
}

func TestAvailableForHelpers(t *testing.T) {
	t.Setenv(HideEnv, "templates")
	if err := Available(Templates, nil); err == nil || !strings.Contains(err.Error(), "templates is hidden by FORKLINE_HIDE=templates") {
		t.Errorf("Available(templates) = %v", err)
	}
	if err := Available(Docker, nil); err != nil {
		t.Errorf("Available(docker) = %v, want nil (not hidden, no probe)", err)
	}
}

// Every component says what it is and how to install it.
func TestEveryComponentSaysHowToInstallIt(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Components() {
		if c.Name == "" || c.What == "" || c.Install == "" || seen[c.Name] || c.Name == "all" {
			t.Errorf("component %+v", c)
		}
		seen[c.Name] = true
	}
}

// The docker probe reads DOCKER_HOST: an engine that is not there is an
// error naming it.
func TestPingDockerWithoutEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/none.sock")
	if err := PingDocker(); err == nil || !strings.Contains(err.Error(), "no Docker engine answers") {
		t.Errorf("PingDocker() = %v", err)
	}
	t.Setenv("DOCKER_HOST", "ssh://host")
	if err := PingDocker(); err == nil || !strings.Contains(err.Error(), "unix:// and tcp://") {
		t.Errorf("PingDocker() = %v", err)
	}
}
