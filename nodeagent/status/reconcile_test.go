package status

import (
	"log/slog"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// TestReconcileLooksAgainOnlyAtWhatChanged: the leader writes an aggregate once; a reconcile
// after another object's change leaves the settled one alone, and looks at it again once it
// changes (a new resourceVersion) or the nodes do.
func TestReconcileLooksAgainOnlyAtWhatChanged(t *testing.T) {
	ef := func(rv string, msgs ...string) *ovnv1.EgressFirewall {
		return &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default", ResourceVersion: rv},
			Status: ovnv1.EgressFirewallStatus{Messages: msgs}}
	}
	node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	snap, update := watcherstest.Updatable(node("n1"), ef("1", "n1: "+fwApplied))
	client := fake.NewSimpleClientset()
	writes := 0
	client.PrependReactor("patch", "egressfirewalls", func(k8stesting.Action) (bool, runtime.Object, error) {
		writes++
		return true, &ovnv1.EgressFirewall{}, nil
	})
	a := &Aggregator{Client: client, Snapshot: snap, Log: slog.New(slog.DiscardHandler)}
	reconcile := func(what string, want int) {
		t.Helper()
		writes = 0
		a.reconcile(t.Context())
		if writes != want {
			t.Errorf("%s: %d writes, want %d", what, writes, want)
		}
	}
	reconcile("first", 1) // applied
	update(ef("2", "n1: "+fwApplied))
	// The object as the leader's write left it:
	update(&ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default", ResourceVersion: "2"},
		Status: ovnv1.EgressFirewallStatus{Messages: []string{"n1: " + fwApplied}, Status: fwApplied}})
	reconcile("after its own write", 0)
	reconcile("nothing changed", 0)
	update(&ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default", ResourceVersion: "2"},
		Status: ovnv1.EgressFirewallStatus{Messages: []string{"n1: " + fwNotApplied + ": boom"}, Status: fwApplied}})
	reconcile("changed behind the same resourceVersion (not a real server's doing)", 0)
	update(&ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default", ResourceVersion: "3"},
		Status: ovnv1.EgressFirewallStatus{Messages: []string{"n1: " + fwNotApplied + ": boom"}, Status: fwApplied}})
	reconcile("a node's entry failed", 1)
	reconcile("the object as it was, its write not seen yet", 1) // written again: not settled
	update(&ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default", ResourceVersion: "5"},
		Status: ovnv1.EgressFirewallStatus{Messages: []string{"n1: " + fwApplied}, Status: fwApplied}})
	reconcile("applied again, as written", 0)
	update(node("n2")) // the nodes changed, the object did not: n2 has no entry yet
	reconcile("after the nodes changed (the aggregate unset: two managers give it up)", 2)
}
