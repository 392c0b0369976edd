package main

import (
	"strings"
	"testing"
)

// events is a `go test -json` stream of one package: a pass, a component
// skip (testenv.Missing), a skip that did not go through testenv, an
// inapplicable one, and a failure.
const events = `{"Action":"run","Package":"m/p","Test":"TestPass"}
{"Action":"pass","Package":"m/p","Test":"TestPass"}
{"Action":"run","Package":"m/p","Test":"TestDocker"}
{"Action":"output","Package":"m/p","Test":"TestDocker","Output":"    x_test.go:12: testenv: docker missing: docker is hidden by FORKLINE_HIDE=all\n"}
{"Action":"output","Package":"m/p","Test":"TestDocker","Output":"        (a Docker engine; install: bash .ci/docker-up.sh)\n"}
{"Action":"skip","Package":"m/p","Test":"TestDocker"}
{"Action":"output","Package":"m/p","Test":"TestShort","Output":"    y_test.go:3: no ps\n"}
{"Action":"skip","Package":"m/p","Test":"TestShort"}
{"Action":"output","Package":"m/p","Test":"TestConf/Fork","Output":"    providertest.go:9: testenv: not applicable: provider x cannot checkpoint\n"}
{"Action":"skip","Package":"m/p","Test":"TestConf/Fork"}
{"Action":"output","Package":"m/p","Test":"TestBroken","Output":"    z_test.go:5: boom\n"}
{"Action":"fail","Package":"m/p","Test":"TestBroken"}
{"Action":"fail","Package":"m/p"}
{"Action":"skip","Package":"m/empty"}
`

func TestReportListsSkipsAndFailsOnTheRest(t *testing.T) {
	rep, err := read(strings.NewReader(events))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if rep.write(&out) {
		t.Error("a failure and an unnamed skip must fail the report")
	}
	s := out.String()
	for _, want := range []string{
		"TestDocker", "docker is hidden by FORKLINE_HIDE=all",
		"1 tests passed in 0 packages; 1 skipped for a missing component:",
		"docker             1  install: bash .ci/docker-up.sh",
		"1 skipped as not applicable here (no component missing):\n  m/p TestConf/Fork: provider x cannot checkpoint",
		"SKIPPED WITHOUT testenv: m/p TestShort", "no ps",
		"FAILED: m/p TestBroken", "boom", "FAILED: package m/p",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the report lacks %q:\n%s", want, s)
		}
	}
}

func TestOnlyComponentSkipsPass(t *testing.T) {
	var kept []string
	for _, l := range strings.Split(events, "\n") {
		if !strings.Contains(l, "TestShort") && !strings.Contains(l, `"fail"`) && !strings.Contains(l, "TestBroken") {
			kept = append(kept, l)
		}
	}
	rep, err := read(strings.NewReader(strings.Join(kept, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if !rep.write(&out) {
		t.Errorf("passes and testenv skips only must pass:\n%s", out.String())
	}
}

func TestNoInputFails(t *testing.T) {
	rep, err := read(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if rep.write(&out) || !strings.Contains(out.String(), "NO TEST RAN") {
		t.Errorf("an empty input must fail:\n%s", out.String())
	}
}
