package status

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	egressfake "github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/watchers"
)

// An agent keeps its own entry of each per-node status, nothing else of that status; "node-ab"
// is another node than "node-a".
func TestOwnEntriesKeepsThisNodesEntryAlone(t *testing.T) {
	trim := OwnEntries("node-a")
	ef := &ovnv1.EgressFirewall{Status: ovnv1.EgressFirewallStatus{Status: fwApplied, Messages: []string{
		"node-ab: " + fwApplied, "node-a: " + fwApplied, "node-b: " + fwNotApplied + ": boom"}}}
	trim(ef)
	if want := []string{"node-a: " + fwApplied}; ef.Status.Status != "" || !slices.Equal(ef.Status.Messages, want) {
		t.Errorf("EgressFirewall status = %+v, want messages %q alone", ef.Status, want)
	}
	q := &ovnv1.EgressQoS{Status: ovnv1.EgressQoSStatus{Status: qosApplied, Conditions: []metav1.Condition{
		{Type: qosZonePrefix + "node-ab"}, {Type: qosZonePrefix + "node-a", Message: qosApplied}, {Type: qosZonePrefix + "node-b"}}}}
	trim(q)
	if q.Status.Status != "" || len(q.Status.Conditions) != 1 || q.Status.Conditions[0].Type != qosZonePrefix+"node-a" || q.Status.Conditions[0].Message != qosApplied {
		t.Errorf("EgressQoS status = %+v, want node-a's condition alone", q.Status)
	}
	r := &ovnv1.AdminPolicyBasedExternalRoute{Status: ovnv1.AdminPolicyBasedRouteStatus{Status: ovnv1.SuccessStatus, LastTransitionTime: metav1.Now(),
		Messages: []string{"node-b: configured external gateway IPs: 192.0.2.1", "node-a: configured external gateway IPs: 192.0.2.1"}}}
	trim(r)
	if r.Status.Status != "" || !r.Status.LastTransitionTime.IsZero() || !slices.Equal(r.Status.Messages, []string{"node-a: configured external gateway IPs: 192.0.2.1"}) {
		t.Errorf("external route status = %+v, want node-a's message alone", r.Status)
	}
}

// Another node's status write reaches an agent as no change at all: in an N-node cluster each
// object's N writes would otherwise wake all N agents' writers. Its own entry's change does.
func TestOtherNodesEntriesSignalNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		egress := egressfake.NewSimpleClientset()
		w, err := watchers.New(kubefake.NewClientset(), egress, 0, watchers.TrimEgress(OwnEntries("node-a")))
		if err != nil {
			t.Fatal(err)
		}
		changes := w.Subscribe(true)
		ctx, cancel := context.WithCancel(t.Context())
		defer func() { cancel(); w.Shutdown() }()
		if err := w.Start(ctx, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		signalled := func() bool {
			synctest.Wait()
			select {
			case <-changes:
				return true
			default:
				return false
			}
		}
		efs := egress.K8sOVNV1().EgressFirewalls("ns")
		ef, err := efs.Create(ctx, &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "default"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !signalled() {
			t.Fatal("a new EgressFirewall signalled no change")
		}
		write := func(msgs ...string) {
			t.Helper()
			ef.Status = ovnv1.EgressFirewallStatus{Status: fwApplied, Messages: msgs}
			if ef, err = efs.UpdateStatus(ctx, ef, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		write("node-b: " + fwApplied)
		if signalled() {
			t.Error("another node's entry (and the aggregate) signalled a change")
		}
		write("node-b: "+fwApplied, "node-a: "+fwApplied)
		if !signalled() {
			t.Error("this node's own entry signalled no change")
		}
		cached, err := w.Snapshot().EgressFirewalls.EgressFirewalls("ns").Get("default")
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"node-a: " + fwApplied}; !slices.Equal(cached.Status.Messages, want) {
			t.Errorf("cached messages %q, want %q", cached.Status.Messages, want)
		}
	})
}
