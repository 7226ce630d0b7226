package cniserver

import (
	"context"
	"net/netip"
	"testing"
	"testing/synctest"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// Another node's pod its agent announced: the compile steps see it with its CNI addresses,
// LocalPods does not; the announcement is decided by the first sync that included it, served
// when the applied state SNATs its addresses; once the Pod object shows them it is dropped.
// In a bubble: "not decided" is checked once the announcing goroutine is durably blocked.
func TestRemoteAnnouncement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStore()
		obj := pod("ns", "web", nil)
		obj.Spec.NodeName = "other"
		a4 := netip.MustParseAddr("10.0.1.5")
		snatState := &dataplane.State{Nftables: dataplane.NftablesState{SNAT: []dataplane.SNAT{{Pod: a4, To: netip.MustParseAddr("192.0.2.100")}}}}

		type result struct {
			served bool
			err    error
		}
		results := make(chan result, 1)
		go func() {
			served, err := s.AnnounceRemote(context.Background(), obj, []netip.Addr{a4})
			results <- result{served, err}
		}()
		waitAnnounced(t, s)
		// A sync that began before the announcement decides nothing.
		s.Applied(snatState, dataplane.Result{})
		synctest.Wait()
		select {
		case r := <-results:
			t.Fatalf("decided by a sync that did not include it: %+v", r)
		default:
		}
		snap, announced := s.Overlay(snapshot(obj))
		if len(announced) != 0 {
			t.Errorf("another node's pod among this node's announced pods: %+v", announced)
		}
		if got, err := snap.Pods.Pods("ns").Get("web"); err != nil || got.Status.PodIP != "10.0.1.5" {
			t.Errorf("lister gives %+v (%v), want the pod with its announced address", got, err)
		}
		if local, _ := cluster.LocalPods(snap, "n", announced...); len(local) != 0 {
			t.Errorf("LocalPods lists %+v", local)
		}
		s.Applied(snatState, dataplane.Result{})
		if r := <-results; !r.served || r.err != nil {
			t.Errorf("announcement: %+v, want served", r)
		}
		if n := s.keepOnly(nil); n != 0 {
			t.Errorf("CNI GC dropped %d announcements of other nodes' pods", n)
		}

		// Not served here: decided, not served.
		go func() {
			served, err := s.AnnounceRemote(context.Background(), obj, []netip.Addr{netip.MustParseAddr("10.0.1.6")})
			results <- result{served, err}
		}()
		waitAnnounced(t, s)
		s.Overlay(snapshot(obj))
		s.Applied(snatState, dataplane.Result{})
		if r := <-results; r.served || r.err != nil {
			t.Errorf("announcement of an address not SNATed here: %+v, want not served", r)
		}

		// The Pod object shows the address: the announcement goes.
		shown := pod("ns", "web", nil, "10.0.1.6")
		shown.Spec.NodeName = "other"
		s.Overlay(snapshot(shown))
		s.mu.Lock()
		left := len(s.byID)
		s.mu.Unlock()
		if left != 0 {
			t.Errorf("%d announcements left once the Pod object shows the address", left)
		}
	})
}

// waitAnnounced waits until the announcing goroutine is durably blocked (synctest), and fails
// unless the store then holds an undecided announcement.
func waitAnnounced(t *testing.T, s *Store) {
	t.Helper()
	synctest.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.byID {
		if e.programmed.IsZero() {
			return
		}
	}
	t.Fatal("no announcement")
}

// A pod's egress nodes are the gateways of the EgressIP tables its mark selects; other tables
// (an external route's) are no egress nodes.
func TestSteerTargets(t *testing.T) {
	a := netip.MustParseAddr
	state := &dataplane.State{
		Classifier: dataplane.ClassifierState{Pods: []dataplane.Pod{
			{Origin: dataplane.Origin{Kind: cluster.KindPod, Namespace: "ns", Name: "steered"}, Mark: 0x10000},
			{Origin: dataplane.Origin{Kind: cluster.KindPod, Namespace: "ns", Name: "routed"}, Mark: 0x20000},
			{Origin: dataplane.Origin{Kind: cluster.KindPod, Namespace: "ns", Name: "plain"}}}},
		Routing: dataplane.RoutingState{
			Rules: []dataplane.RouteRule{{Mark: 0x10000, Table: 1}, {Mark: 0x10000, Table: 1, IPv6: true}, {Mark: 0x20000, Table: 2}},
			Tables: []dataplane.RouteTable{
				{Origin: dataplane.Origin{Kind: cluster.KindEgressIP, Name: "eip"}, ID: 1, Routes: []dataplane.Route{
					{Nexthops: []dataplane.Nexthop{{Gateway: a("192.0.2.2")}, {Gateway: a("192.0.2.3")}}},
					{Via: &dataplane.Nexthop{Gateway: a("2001:db8::2")}}}},
				{Origin: dataplane.Origin{Kind: "AdminPolicyBasedExternalRoute", Name: "gws"}, ID: 2, Routes: []dataplane.Route{
					{Via: &dataplane.Nexthop{Gateway: a("198.51.100.1")}}}},
			}},
	}
	got := steerTargets(state)
	if want := []netip.Addr{a("192.0.2.2"), a("192.0.2.3"), a("2001:db8::2")}; len(got) != 1 || !containsAll(got[podKey{"ns", "steered"}], want) || len(got[podKey{"ns", "steered"}]) != 3 {
		t.Errorf("targets %v, want only the steered pod's %v", got, want)
	}
}
