package status

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	egressdv1alpha1 "github.com/egressd/egressd/api/egressd/v1alpha1"
	"github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// patchedStatus is what one merge patch of a status said.
type patchedStatus struct {
	resource string
	manager  string
	rv       string
	status   map[string]json.RawMessage
}

func recordPatches(t *testing.T, client *fake.Clientset) *[]patchedStatus {
	var got []patchedStatus
	client.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchActionImpl)
		if p.Subresource != "status" {
			t.Errorf("patched %s/%s, want the status subresource", p.Resource.Resource, p.Subresource)
		}
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Status map[string]json.RawMessage `json:"status"`
		}
		if err := json.Unmarshal(p.Patch, &body); err != nil {
			t.Fatal(err)
		}
		got = append(got, patchedStatus{p.Resource.Resource, p.PatchOptions.FieldManager, body.Metadata.ResourceVersion, body.Status})
		objects := map[string]runtime.Object{"egressfirewalls": &ovnv1.EgressFirewall{}, "egressqoses": &ovnv1.EgressQoS{},
			"adminpolicybasedexternalroutes": &ovnv1.AdminPolicyBasedExternalRoute{}}
		return true, objects[p.Resource.Resource], nil
	})
	return &got
}

func nodeReportOf(node string, firewalls string, objects ...egressdv1alpha1.ObjectOutcome) *egressdv1alpha1.NodeReport {
	return &egressdv1alpha1.NodeReport{ObjectMeta: metav1.ObjectMeta{Name: node},
		Programmed: egressdv1alpha1.Programmed{EgressFirewalls: firewalls, EgressQoSes: firewalls, AdminPolicyBasedExternalRoutes: firewalls},
		Objects:    objects}
}

func strs(t *testing.T, raw json.RawMessage) []string {
	var out []string
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func str(t *testing.T, raw json.RawMessage) string {
	var out string
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// The controller writes an EgressFirewall's status from the nodes' reports: a node's entry once
// its report has come as far as the object's generation, the aggregate once every node's has
// (or as soon as one failed), a failure of an older generation not counted, and above
// PerNodeUpTo nodes only the entries that say more than applied.
func TestAggregatorFirewallFromReports(t *testing.T) {
	node := func(n string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}} }
	ef := &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default", UID: "u1", Generation: 1, ResourceVersion: "100"}}
	snap, update := watcherstest.Updatable(node("n1"), node("n2"), ef)
	client := fake.NewSimpleClientset()
	patches := recordPatches(t, client)
	a := &Aggregator{Client: client, Snapshot: snap, PerNodeUpTo: 10, Log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	last := func() patchedStatus {
		t.Helper()
		if len(*patches) == 0 {
			t.Fatal("no status written")
		}
		return (*patches)[len(*patches)-1]
	}

	a.reconcile(ctx)
	if len(*patches) != 0 {
		t.Fatalf("no report yet: wrote %+v", *patches)
	}
	// n1 has programmed the firewall, n2 not yet: n1's entry, no aggregate.
	update(nodeReportOf("n1", "100"))
	update(nodeReportOf("n2", "99"))
	a.reconcile(ctx)
	p := last()
	if p.resource != "egressfirewalls" || p.manager != leaderManager || p.rv != "100" ||
		!slices.Equal(strs(t, p.status["messages"]), []string{"n1: " + fwApplied}) || str(t, p.status["status"]) != "" {
		t.Fatalf("one node done: %+v", p)
	}
	// The same again, the cache not caught up: not written twice.
	a.reconcile(ctx)
	if len(*patches) != 1 {
		t.Fatalf("rewritten before the cache showed the write: %d patches", len(*patches))
	}
	ef = ef.DeepCopy()
	ef.ResourceVersion, ef.Status.Messages = "101", []string{"n1: " + fwApplied}
	update(ef)
	// n2 reaches the status write's resourceVersion: every node applied it.
	update(nodeReportOf("n2", "101"))
	a.reconcile(ctx)
	if p := last(); str(t, p.status["status"]) != fwApplied || !slices.Equal(strs(t, p.status["messages"]), []string{"n1: " + fwApplied, "n2: " + fwApplied}) {
		t.Fatalf("both done: %+v", p)
	}
	ef = ef.DeepCopy()
	ef.ResourceVersion, ef.Status.Status, ef.Status.Messages = "102", fwApplied, []string{"n1: " + fwApplied, "n2: " + fwApplied}
	update(ef)
	a.reconcile(ctx)
	if len(*patches) != 2 {
		t.Fatalf("settled object written again: %+v", (*patches)[2:])
	}

	// n2 fails it: not applied, with n2's failure.
	boom := egressdv1alpha1.ObjectOutcome{Kind: "EgressFirewall", Namespace: "a", Name: "default", Failure: "boom"}
	update(nodeReportOf("n2", "102", boom))
	a.reconcile(ctx)
	failure := "n2: " + fwNotApplied + ": boom"
	if p := last(); str(t, p.status["status"]) != fwNotApplied || !slices.Equal(strs(t, p.status["messages"]), []string{"n1: " + fwApplied, failure}) {
		t.Fatalf("n2 failed: %+v", p)
	}
	ef = ef.DeepCopy()
	ef.ResourceVersion, ef.Status.Status, ef.Status.Messages = "103", fwNotApplied, []string{"n1: " + fwApplied, failure}
	update(ef)

	// A new generation: n2's failure was of the old one, and both nodes keep their entries
	// until they report the new one; the aggregate is unknown meanwhile.
	ef = ef.DeepCopy()
	ef.ResourceVersion, ef.Generation = "150", 2
	update(ef)
	a.reconcile(ctx)
	if p := last(); str(t, p.status["status"]) != "" || !slices.Equal(strs(t, p.status["messages"]), []string{"n1: " + fwApplied, failure}) {
		t.Fatalf("new generation, nodes not there yet: %+v", p)
	}
	ef = ef.DeepCopy()
	ef.ResourceVersion, ef.Status.Status = "151", ""
	update(ef)
	update(nodeReportOf("n1", "151"))
	update(nodeReportOf("n2", "151"))
	a.reconcile(ctx)
	if p := last(); str(t, p.status["status"]) != fwApplied || !slices.Equal(strs(t, p.status["messages"]), []string{"n1: " + fwApplied, "n2: " + fwApplied}) {
		t.Fatalf("new generation applied: %+v", p)
	}

	// A new leader takes the generation at the resourceVersion it first sees: the nodes' reports
	// not past it yet leave the aggregate the last leader wrote, not unknown.
	ef = ef.DeepCopy()
	ef.ResourceVersion, ef.Status.Status, ef.Status.Messages = "160", fwApplied, []string{"n1: " + fwApplied, "n2: " + fwApplied}
	update(ef)
	fresh := &Aggregator{Client: client, Snapshot: snap, PerNodeUpTo: 10, Log: slog.New(slog.DiscardHandler)}
	before := len(*patches)
	fresh.reconcile(ctx)
	if len(*patches) != before {
		t.Fatalf("a new leader rewrote a settled status while the reports catch up: %+v", last())
	}

	// Above PerNodeUpTo nodes only what says more than applied is shown; a deleted node's
	// entry goes.
	a.PerNodeUpTo = 1
	update(nodeReportOf("n2", "151", egressdv1alpha1.ObjectOutcome{Kind: "EgressFirewall", Namespace: "a", Name: "default", Note: "DNS capped"}))
	a.reconcile(ctx)
	if p := last(); str(t, p.status["status"]) != fwApplied || !slices.Equal(strs(t, p.status["messages"]), []string{"n2: " + fwApplied + "; DNS capped"}) {
		t.Fatalf("large cluster: %+v", p)
	}
}

// An EgressQoS gets a condition Ready-In-Zone-<node> per node and an AdminPolicyBased-
// ExternalRoute a message naming its gateways, from the same reports.
func TestAggregatorQoSAndRoutes(t *testing.T) {
	q := &ovnv1.EgressQoS{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "default", UID: "q", Generation: 1, ResourceVersion: "10"}}
	pol := &ovnv1.AdminPolicyBasedExternalRoute{ObjectMeta: metav1.ObjectMeta{Name: "pol", UID: "p", Generation: 1, ResourceVersion: "11"}}
	snap := watcherstest.Snapshot(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, q, pol,
		nodeReportOf("n1", "11", egressdv1alpha1.ObjectOutcome{Kind: "EgressQoS", Namespace: "a", Name: "default", Failure: "bad selector"},
			egressdv1alpha1.ObjectOutcome{Kind: "AdminPolicyBasedExternalRoute", Name: "pol", Gateways: []string{"192.0.2.9", "192.0.2.10"}}))
	client := fake.NewSimpleClientset()
	patches := recordPatches(t, client)
	(&Aggregator{Client: client, Snapshot: snap, PerNodeUpTo: 10, Log: slog.New(slog.DiscardHandler)}).reconcile(context.Background())
	byResource := map[string]patchedStatus{}
	for _, p := range *patches {
		byResource[p.resource] = p
	}
	qp := byResource["egressqoses"]
	var conds []metav1.Condition
	if err := json.Unmarshal(qp.status["conditions"], &conds); err != nil {
		t.Fatal(err)
	}
	if str(t, qp.status["status"]) != qosNotApplied || len(conds) != 1 || conds[0].Type != "Ready-In-Zone-n1" || conds[0].Status != metav1.ConditionFalse ||
		conds[0].Reason != "SetupFailed" || conds[0].Message != qosNotApplied+": bad selector" || conds[0].LastTransitionTime.IsZero() {
		t.Errorf("EgressQoS: %+v %+v", qp, conds)
	}
	rp := byResource["adminpolicybasedexternalroutes"]
	// Sorted as strings, as upstream's sets.List: "192.0.2.10" before "192.0.2.9".
	if str(t, rp.status["status"]) != "Success" || !slices.Equal(strs(t, rp.status["messages"]), []string{"n1: configured external gateway IPs: 192.0.2.10,192.0.2.9"}) ||
		len(rp.status["lastTransitionTime"]) == 0 {
		t.Errorf("AdminPolicyBasedExternalRoute: %+v", rp)
	}
	if got, want := routeEntry("n1", nodeOutcome{failure: "boom"}), "n1: n1 failed to apply policy: boom"; got != want {
		t.Errorf("route failure entry %q, want %q", got, want)
	}
}

// The leader keeps when each object took its generation across reconciles, and forgets a
// deleted object's at the next one: 10,000 namespaces come and go without the map growing.
func TestAggregatorForgetsDeletedObjects(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	ef := func(ns string) *ovnv1.EgressFirewall {
		return &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default", UID: "u-" + types.UID(ns), Generation: 1, ResourceVersion: "100"}}
	}
	a := &Aggregator{Client: fake.NewSimpleClientset(), Snapshot: watcherstest.Snapshot(node, nodeReportOf("n1", "100"), ef("a"), ef("b")),
		PerNodeUpTo: 10, Log: slog.New(slog.DiscardHandler)}
	a.reconcile(context.Background())
	if len(a.taken) != 2 {
		t.Fatalf("kept %d objects' generations, want 2", len(a.taken))
	}
	a.Snapshot = watcherstest.Snapshot(node, nodeReportOf("n1", "100"), ef("a")) // b deleted
	a.reconcile(context.Background())
	if _, kept := a.taken[dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: "b", Name: "default"}]; kept || len(a.taken) != 1 {
		t.Fatalf("the deleted object's generation kept: %d kept", len(a.taken))
	}
}
