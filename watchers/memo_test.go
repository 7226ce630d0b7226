package watchers

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestMemo: a value is kept while no object of the kinds it read changed, computed again after
// one did, after Forget, after a failure, and every time when the generations are unknown.
func TestMemo(t *testing.T) {
	g := NewGenerations(&corev1.Pod{}, &corev1.Node{})
	kinds := []any{&corev1.Pod{}}
	var m Memo[int]
	computed := 0
	get := func(gens *Generations, fail bool) int {
		t.Helper()
		v, _ := m.Get(gens, kinds, func() (int, error) {
			computed++
			if fail {
				return computed, errors.New("lister failed")
			}
			return computed, nil
		})
		return v
	}
	for _, step := range []struct {
		what   string
		before func()
		gens   *Generations
		fail   bool
		want   int
	}{
		{"first", nil, g, false, 1},
		{"nothing changed", nil, g, false, 1},
		{"another kind changed", func() { g.Changed(&corev1.Node{}, "") }, g, false, 1},
		{"its kind changed", func() { g.Changed(&corev1.Pod{}, "") }, g, false, 2},
		{"forgotten", func() { m.Forget() }, g, false, 3},
		{"failed", func() { g.Changed(&corev1.Pod{}, "") }, g, true, 4},
		{"after a failure", nil, g, false, 5},
		{"unknown generations", nil, nil, false, 6},
		{"unknown generations again", nil, nil, false, 7},
	} {
		if step.before != nil {
			step.before()
		}
		if got := get(step.gens, step.fail); got != step.want {
			t.Errorf("%s: got the value of computation %d, want %d", step.what, got, step.want)
		}
	}
}
