package watchers

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// Changes names each object of its kinds that changed once until taken, signals as a
// subscription does, and says every object once it would keep more than it bounds.
func TestChangesNameWhatChanged(t *testing.T) {
	w := &Watchers{}
	c := w.SubscribeChanges(true, &ovnv1.EgressFirewall{})
	ef := func(ns string) string { return ns + "/default" }
	w.signal(&ovnv1.EgressFirewall{}, ef("b"), false) // status only: this subscriber reads status
	w.signal(&ovnv1.EgressFirewall{}, ef("a"), true)
	w.signal(&ovnv1.EgressFirewall{}, ef("a"), true)
	w.signal(&corev1.Node{}, "n1", true) // not its kind
	select {
	case <-c.C:
	default:
		t.Fatal("no signal")
	}
	got, all := c.Take()
	slices.SortFunc(got, func(x, y ChangedObject) int { return strings.Compare(x.Namespace, y.Namespace) })
	want := []ChangedObject{{Kind: "EgressFirewall", Namespace: "a", Name: "default"}, {Kind: "EgressFirewall", Namespace: "b", Name: "default"}}
	if all || !slices.Equal(got, want) {
		t.Errorf("took %v (all %v), want %v", got, all, want)
	}
	if got, all := c.Take(); len(got) != 0 || all {
		t.Errorf("taken again: %v (all %v), want nothing", got, all)
	}
	for i := range maxChanges + 1 {
		w.signal(&ovnv1.EgressFirewall{}, ef(fmt.Sprint(i)), true)
	}
	if got, all := c.Take(); len(got) != 0 || !all {
		t.Errorf("past the bound: %d objects (all %v), want every object", len(got), all)
	}
	w.signal(&ovnv1.EgressFirewall{}, ef("a"), true)
	w.signal(&ovnv1.EgressFirewall{}, "", true) // an object the watchers could not name
	if got, all := c.Take(); len(got) != 0 || !all {
		t.Errorf("after an unnamed object: %v (all %v), want every object", got, all)
	}
}
