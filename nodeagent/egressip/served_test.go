package egressip

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		got, err := ServedPods(snap, node, nil)
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

// The namespaces a selector picks are named once while the caller keeps known: an assignment
// changes the EgressIP, not what its selector picks.
func TestServedPodsKeepsWhatNamespaceSelectorsPick(t *testing.T) {
	e := &ovnv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "e"}, Spec: ovnv1.EgressIPSpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
		Status: ovnv1.EgressIPStatus{Items: []ovnv1.EgressIPStatusItem{{Node: "n", EgressIP: "192.0.2.100"}}}}
	snap := watcherstest.Snapshot(e, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a1", Labels: map[string]string{"team": "a"}}})
	known := NamespaceScopes{}
	got, err := ServedPods(snap, "n", known)
	if err != nil {
		t.Fatal(err)
	}
	if want := []watchers.PodScope{{Namespace: "a1"}}; !slices.Equal(got, want) || !slices.Equal(known["team=a"], want) {
		t.Fatalf("read %v, kept %v; want %v for both", got, known, want)
	}
	kept := []watchers.PodScope{{Namespace: "kept"}}
	known["team=a"] = kept
	if got, _ = ServedPods(snap, "n", known); !slices.Equal(got, kept) {
		t.Errorf("with the selector's namespaces known, read %v, want them: %v", got, kept)
	}
}
