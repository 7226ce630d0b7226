package status

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	egressdv1alpha1 "github.com/egressd/egressd/api/egressd/v1alpha1"
	"github.com/egressd/egressd/api/generated/clientset/versioned/fake"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/watcherstest"
)

// A sync's outcome becomes the node's NodeReport: its failures, notes and policies' gateways
// (the objects in force say nothing more), how far the caches had come, owned by the Node; it
// is written again only when it says something else, and each new failure makes an Event.
func TestReporterWritesTheNodeReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}}
		ef := func(ns string) *ovnv1.EgressFirewall {
			return &ovnv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default", ResourceVersion: "40"}}
		}
		pol := &ovnv1.AdminPolicyBasedExternalRoute{ObjectMeta: metav1.ObjectMeta{Name: "pol", ResourceVersion: "41"}}
		snap := watcherstest.Snapshot(node, ef("a"), ef("b"), pol)
		marks := watchers.NewMarks(&ovnv1.EgressFirewall{}, &ovnv1.EgressQoS{}, &ovnv1.AdminPolicyBasedExternalRoute{})
		snap.Marks = marks
		client := fake.NewSimpleClientset()
		var applied []*egressdv1alpha1.NodeReport // each server-side apply, as sent
		client.PrependReactor("patch", "nodereports", func(a k8stesting.Action) (bool, runtime.Object, error) {
			p := a.(k8stesting.PatchActionImpl)
			var nr egressdv1alpha1.NodeReport
			if err := json.Unmarshal(p.Patch, &nr); err != nil || p.PatchType != types.ApplyPatchType || p.PatchOptions.FieldManager != "n1" {
				t.Errorf("patch %s as %q: %v", p.PatchType, p.PatchOptions.FieldManager, err)
			}
			applied = append(applied, &nr)
			return true, &nr, nil
		})
		last := func() *egressdv1alpha1.NodeReport {
			if len(applied) == 0 {
				t.Fatal("no report written")
			}
			return applied[len(applied)-1]
		}
		events := record.NewFakeRecorder(10)
		r := &Reporter{Node: "n1", Client: client, Snapshot: snap, Recorder: events, Log: slog.New(slog.DiscardHandler), Changed: marks.Moved(),
			RouteGateways: func(*watchers.Snapshot, string) ([]netip.Addr, error) {
				return []netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("192.0.2.10")}, nil
			}}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go r.Run(ctx)

		outcomes := cluster.NewOutcomes(nil)
		origin := func(kind dataplane.Kind, ns, name string) dataplane.Origin {
			return dataplane.Origin{Kind: kind, Namespace: ns, Name: name}
		}
		outcomes.Set(origin(cluster.KindEgressFirewall, "a", "default"), errors.New("boom"))
		outcomes.Set(origin(cluster.KindEgressFirewall, "b", "default"), nil)
		outcomes.Set(origin(cluster.KindExternalRoute, "", "pol"), nil)
		outcomes.Set(origin(cluster.KindEgressIP, "", "eip"), errors.New("not reported here"))
		notes := map[dataplane.Origin]string{origin(cluster.KindEgressFirewall, "b", "default"): "DNS capped"}
		for _, o := range []any{ef("a"), ef("b")} {
			observe(marks, o)
		}
		observe(marks, pol)
		r.Report(outcomes, notes, dataplane.Result{}, marks.Capture())
		time.Sleep(time.Second)
		synctest.Wait()

		got := last()
		if got.Programmed != (egressdv1alpha1.Programmed{EgressFirewalls: "40", AdminPolicyBasedExternalRoutes: "41"}) {
			t.Errorf("programmed %+v, want firewalls 40, routes 41, QoS unknown", got.Programmed)
		}
		want := []egressdv1alpha1.ObjectOutcome{
			{Kind: "AdminPolicyBasedExternalRoute", Name: "pol", Gateways: []string{"192.0.2.10", "192.0.2.9"}},
			{Kind: "EgressFirewall", Namespace: "a", Name: "default", Failure: "boom"},
			{Kind: "EgressFirewall", Namespace: "b", Name: "default", Note: "DNS capped"},
		}
		if len(got.Objects) != len(want) {
			t.Fatalf("objects %+v, want %+v", got.Objects, want)
		}
		for i := range want {
			if g := got.Objects[i]; g.Kind != want[i].Kind || g.Namespace != want[i].Namespace || g.Name != want[i].Name ||
				g.Failure != want[i].Failure || g.Note != want[i].Note || len(g.Gateways) != len(want[i].Gateways) ||
				len(g.Gateways) > 0 && (g.Gateways[0] != want[i].Gateways[0] || g.Gateways[1] != want[i].Gateways[1]) {
				t.Errorf("object %d: %+v, want %+v", i, g, want[i])
			}
		}
		if refs := got.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].Name != "n1" || refs[0].UID != "node-uid" {
			t.Errorf("owner references %+v, want the Node n1", refs)
		}
		if n := len(events.Events); n != 2 {
			t.Errorf("%d events, want 2 (the failure and the note)", n)
		}

		// The same outcome again writes nothing; a status write (a status-only event) moves
		// the report on without a sync.
		before := len(applied)
		r.Report(outcomes, notes, dataplane.Result{}, marks.Capture())
		time.Sleep(time.Second)
		synctest.Wait()
		if len(applied) != before {
			t.Errorf("unchanged report written again")
		}
		status := ef("a")
		status.ResourceVersion = "45"
		marks.Observe(&ovnv1.EgressFirewall{}, status, false)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := last(); got.Programmed.EgressFirewalls != "45" {
			t.Errorf("after a status-only event: firewalls programmed through %q, want 45", got.Programmed.EgressFirewalls)
		}
		if len(events.Events) != 2 {
			t.Errorf("an Event repeated for the same failure")
		}
	})
}

func observe(m *watchers.Marks, obj any) {
	switch obj.(type) {
	case *ovnv1.EgressFirewall:
		m.Observe(&ovnv1.EgressFirewall{}, obj, true)
	case *ovnv1.AdminPolicyBasedExternalRoute:
		m.Observe(&ovnv1.AdminPolicyBasedExternalRoute{}, obj, true)
	}
}
