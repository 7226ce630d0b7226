package status

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	k8stesting "k8s.io/client-go/testing"

	"github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

func TestRouteMessage(t *testing.T) {
	gws := []netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("192.0.2.10")}
	// Sorted as strings, as upstream's sets.List: "192.0.2.10" before "192.0.2.9".
	if got, want := routeMessage("n1", gws, nil), "n1: configured external gateway IPs: 192.0.2.10,192.0.2.9,2001:db8::1"; got != want {
		t.Errorf("success: %q, want %q", got, want)
	}
	if got, want := routeMessage("n1", nil, nil), "n1: configured external gateway IPs: "; got != want {
		t.Errorf("no gateway: %q, want %q", got, want)
	}
	if got, want := routeMessage("n1", gws, errors.New("boom")), "n1: n1 failed to apply policy: boom"; got != want {
		t.Errorf("failure: %q, want %q", got, want)
	}
}

func TestRouteAggregate(t *testing.T) {
	nodes := sets.New("n1", "n2")
	ok1, ok2 := routeMessage("n1", nil, nil), routeMessage("n2", nil, nil)
	bad2 := routeMessage("n2", nil, errors.New("x"))
	for _, tc := range []struct {
		name   string
		msgs   []string
		status string
		stale  []string
	}{
		{"all succeeded", []string{ok1, ok2}, "Success", nil},
		{"one missing", []string{ok1}, "", nil},
		{"one failed", []string{ok1, bad2}, "Fail", nil},
		{"only a failure", []string{bad2}, "Fail", nil},
		{"stale node's failure ignored", []string{ok1, ok2, routeMessage("gone", nil, errors.New("x"))}, "Success", []string{"gone"}},
	} {
		status, stale := aggregate(routeVerdicts(tc.msgs), nodes, string(ovnv1.SuccessStatus), string(ovnv1.FailStatus))
		if status != tc.status || len(stale) != len(tc.stale) || len(stale) > 0 && stale[0] != tc.stale[0] {
			t.Errorf("%s: %q %v, want %q %v", tc.name, status, stale, tc.status, tc.stale)
		}
	}
}

// The entry is applied to status with the node as field manager (forced), and not again
// while the object already shows it.
func TestWriteRouteEntry(t *testing.T) {
	pol := &ovnv1.AdminPolicyBasedExternalRoute{ObjectMeta: metav1.ObjectMeta{Name: "pol"},
		Spec: ovnv1.ExternalRouteSpec{NextHops: ovnv1.ExternalNextHops{StaticHops: []*ovnv1.StaticHop{{IP: "192.0.2.1"}}}}}
	client := fake.NewSimpleClientset()
	var applied []appliedStatus
	client.PrependReactor("patch", "adminpolicybasedexternalroutes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchActionImpl)
		var obj ovnv1.AdminPolicyBasedExternalRoute
		if err := json.Unmarshal(p.Patch, &obj); err != nil {
			t.Fatal(err)
		}
		applied = append(applied, appliedStatus{obj.Status, p.PatchOptions, p.Subresource})
		return true, &obj, nil
	})
	w := &Writer{Node: "n1", Client: client, Snapshot: watcherstest.Snapshot(pol),
		RouteGateways: func(*watchers.Snapshot, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
		}}
	o := dataplane.Origin{Kind: cluster.KindExternalRoute, Name: "pol"}
	if _, err := writeRouteEntry(context.Background(), w, o, nil, ""); err != nil || len(applied) != 1 {
		t.Fatalf("%v, %d applies", err, len(applied))
	}
	a := applied[0]
	if want := "n1: configured external gateway IPs: 192.0.2.1"; len(a.status.Messages) != 1 || a.status.Messages[0] != want ||
		a.status.LastTransitionTime.IsZero() || a.sub != "status" || a.options.FieldManager != "n1" || a.options.Force == nil || !*a.options.Force {
		t.Errorf("applied %+v, want messages [%q] with a transition time, on status, as n1, forced", a, want)
	}
	// The object shows the entry: the same outcome writes nothing; another one does.
	pol.Status = a.status
	w.Snapshot = watcherstest.Snapshot(pol)
	if _, err := writeRouteEntry(context.Background(), w, o, nil, ""); err != nil || len(applied) != 1 {
		t.Errorf("unchanged entry written again: %v, %d applies", err, len(applied))
	}
	if _, err := writeRouteEntry(context.Background(), w, o, errors.New("boom"), ""); err != nil || len(applied) != 2 ||
		applied[1].status.Messages[0] != "n1: n1 failed to apply policy: boom" {
		t.Errorf("changed entry: %v %+v", err, applied)
	}
	// A legacy origin (no object) and a deleted policy write nothing.
	if _, err := writeRouteEntry(context.Background(), w, dataplane.Origin{Kind: cluster.KindExternalRoute, Namespace: "a"}, nil, ""); err != nil || len(applied) != 2 {
		t.Errorf("legacy origin: %v, %d applies", err, len(applied))
	}
}

// appliedStatus is what one ApplyStatus call sent.
type appliedStatus struct {
	status  ovnv1.AdminPolicyBasedRouteStatus
	options metav1.PatchOptions
	sub     string
}
