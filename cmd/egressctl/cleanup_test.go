package main

import (
	"errors"
	"reflect"
	"testing"
)

// A failing step does not stop cleanup: every step runs, and every failure is reported.
func TestRunStepsGoesOnPastFailures(t *testing.T) {
	var ran []string
	mk := func(name string, err error) step {
		return step{"remove " + name, "removed " + name, func() error { ran = append(ran, name); return err }}
	}
	busy := errors.New("device or resource busy")
	r, err := runSteps([]step{mk("a", busy), mk("b", nil), mk("c", errors.New("permission denied")), mk("d", nil)})
	if want := []string{"a", "b", "c", "d"}; !reflect.DeepEqual(ran, want) {
		t.Errorf("steps run %q, want %q", ran, want)
	}
	if want := []string{"removed b", "removed d"}; !reflect.DeepEqual(r.Removed, want) {
		t.Errorf("removed %q, want %q", r.Removed, want)
	}
	wantFailed := []string{"remove a: device or resource busy", "remove c: permission denied"}
	if !reflect.DeepEqual(r.Failed, wantFailed) {
		t.Errorf("failed %q, want %q", r.Failed, wantFailed)
	}
	if err == nil || !errors.Is(err, busy) || err.Error() != wantFailed[0]+"\n"+wantFailed[1] {
		t.Errorf("error %v, want both failures", err)
	}
	if r, err := runSteps([]step{mk("e", nil)}); err != nil || r.Failed != nil {
		t.Errorf("no failure: %+v, %v", r, err)
	}
}
