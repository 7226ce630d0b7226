package status

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
)

func TestAggregate(t *testing.T) {
	nodes := sets.New("a", "b")
	for _, tc := range []struct {
		name   string
		msgs   []string
		status string
		stale  []string
	}{
		{"all applied", []string{"a: " + fwApplied, "b: " + fwApplied}, fwApplied, nil},
		{"applied, one with a note", []string{"a: " + fwApplied + "; DNS answers to its pods are not learned", "b: " + fwApplied}, fwApplied, nil},
		{"one missing", []string{"a: " + fwApplied}, "", nil},
		{"one failed, one missing", []string{"a: " + fwNotApplied + ": boom"}, fwNotApplied, nil},
		{"stale node", []string{"a: " + fwApplied, "b: " + fwApplied, "gone: " + fwNotApplied + ": x"}, fwApplied, []string{"gone"}},
		{"nothing", nil, "", nil},
	} {
		status, stale := aggregate(tc.msgs, nodes, fwApplied, fwNotApplied)
		if status != tc.status || !slices.Equal(stale, tc.stale) {
			t.Errorf("%s: %q %v, want %q %v", tc.name, status, stale, tc.status, tc.stale)
		}
	}
	// No node at all: nothing to know, nothing written (an empty set is everyone's superset).
	if status, _ := aggregate(nil, sets.New[string](), fwApplied, fwNotApplied); status != "" {
		t.Errorf("no nodes: %q, want unset", status)
	}
}
