package main

import (
	"strings"
	"testing"
)

// events is go test -json output for a package: one event per line.
func events(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

const (
	pass     = `{"Action":"pass","Package":"p","Test":"TestA"}`
	passSub  = `{"Action":"pass","Package":"p","Test":"TestPrivilegedB/sub"}`
	passPriv = `{"Action":"pass","Package":"p","Test":"TestPrivilegedB"}`
	skipPriv = `{"Action":"skip","Package":"p","Test":"TestPrivilegedC"}`
	pkgPass  = `{"Action":"pass","Package":"p","Elapsed":1.5}`
)

// TestSummaryCountsAndRootShare: passes, failures and skips are counted, subtests as tests,
// and the share of those that need root (named Privileged, or their subtests) is printed.
func TestSummaryCountsAndRootShare(t *testing.T) {
	var out strings.Builder
	ok := summarize(strings.NewReader(events(pass, passPriv, passSub, skipPriv, pkgPass)), &out, false)
	if !ok {
		t.Errorf("a run with a skip outside CI failed:\n%s", out.String())
	}
	for _, want := range []string{"== 3 passed, 0 failed, 1 skipped", "3 of 4 tests need root (75.0%", "PASS p (1.5s)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// TestSummaryFailsOnAPrivilegedSkipInCI: in CI (EGRESSD_REQUIRE_PRIVILEGED=1) a privileged
// test that skipped fails the run, and says so; another test's skip does not.
func TestSummaryFailsOnAPrivilegedSkipInCI(t *testing.T) {
	var out strings.Builder
	if summarize(strings.NewReader(events(pass, skipPriv, pkgPass)), &out, true) {
		t.Errorf("a privileged skip in CI passed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "privileged test skipped in CI (counts as a failure): p TestPrivilegedC") {
		t.Errorf("the summary does not name the skipped privileged test:\n%s", out.String())
	}
	out.Reset()
	skip := `{"Action":"skip","Package":"p","Test":"TestD"}`
	if !summarize(strings.NewReader(events(pass, skip, pkgPass)), &out, true) {
		t.Errorf("an unprivileged skip in CI failed:\n%s", out.String())
	}
}

// TestSummaryRepeatsAFailuresCause: a failed test fails the run, and the lines its test file
// printed come again at the end, where CI's tail shows them.
func TestSummaryRepeatsAFailuresCause(t *testing.T) {
	var out strings.Builder
	ok := summarize(strings.NewReader(events(
		`{"Action":"output","Package":"p","Test":"TestE","Output":"noise from a lab\n"}`,
		`{"Action":"output","Package":"p","Test":"TestE","Output":"    e_test.go:12: the packet was not dropped\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestE"}`, // the package's own result left out
	)), &out, false)
	if ok {
		t.Errorf("a failed test passed the run:\n%s", out.String())
	}
	s := out.String()
	tail := s[strings.Index(s, "== 0 passed, 1 failed"):]
	if !strings.Contains(tail, "p TestE: e_test.go:12: the packet was not dropped") || strings.Contains(tail, "noise") {
		t.Errorf("the end of the summary does not give the failure's own line alone:\n%s", tail)
	}
}
