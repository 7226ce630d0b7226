package egressip

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// TestServedPodsOnlyOnEgressNodes: a node that may host egress IPs (labelled assignable, or
// named in a status) reads the pods of every assigned EgressIP, by their selectors; an
// unassigned EgressIP adds nothing; any other node reads none of other nodes' pods.
func TestServedPodsOnlyOnEgressNodes(t *testing.T) {
	node := func(name string, assignable bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if assignable {
			n.Labels[AssignableLabel] = ""
		}
		return n
	}
	eip := func(name, on string, podSel *metav1.LabelSelector) *ovnv1.EgressIP {
		e := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ovnv1.EgressIPSpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}
		if podSel != nil {
			e.Spec.PodSelector = *podSel
		}
		if on != "" {
			e.Status.Items = []ovnv1.EgressIPStatusItem{{Node: on, EgressIP: "192.0.2.100"}}
		}
		return e
	}
	objs := []runtime.Object{
		node("egress", true), node("worker", false), node("stale", false),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a1", Labels: map[string]string{"team": "a"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b1", Labels: map[string]string{"team": "b"}}},
		eip("web", "egress", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}),
		eip("all", "stale", nil),
		eip("unassigned", "", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}),
	}
	snap := watcherstest.Snapshot(objs...)
	want := []watchers.PodScope{{Selector: "app=web"}, {Namespace: "a1"}}
	for node, want := range map[string][]watchers.PodScope{"egress": want, "stale": want, "worker": nil} {
		got, err := (&Compiler{}).ServedPods(snap, node)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, func(a, b watchers.PodScope) int { return len(a.Selector) - len(b.Selector) })
		slices.SortFunc(want, func(a, b watchers.PodScope) int { return len(a.Selector) - len(b.Selector) })
		if !slices.Equal(got, want) {
			t.Errorf("node %s reads %v, want %v", node, got, want)
		}
	}
}

// The namespaces a selector picks are matched once while the Compiler keeps them (while the
// namespaces stay): an assignment changes the EgressIP, not what its selector picks.
func TestPickedNamespacesMatchOncePerSelector(t *testing.T) {
	snap := watcherstest.Snapshot(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a1", Labels: map[string]string{"team": "a"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b1", Labels: map[string]string{"team": "b"}}})
	sel := labels.SelectorFromSet(labels.Set{"team": "a"})
	p := &pickedNamespaces{bySelector: map[string][]*corev1.Namespace{}}
	got, err := p.pick(snap, sel)
	if err != nil || len(got) != 1 || got[0].Name != "a1" {
		t.Fatalf("picked %v (%v), want a1", got, err)
	}
	kept := []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}}
	p.bySelector["team=a"] = kept
	if got, _ = p.pick(snap, sel); len(got) != 1 || got[0] != kept[0] {
		t.Errorf("with the selector met before, picked %v, want what it picked then", got)
	}
}
