package nodeagent

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/routing"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressip"
)

// Nodes of the tests: n1 (this node) and n2 share 172.18.0.0/24 and fc00::/64; n3 is on
// another subnet of both families; n4 has IPv6 only, off n1's network.
var testPrimaries = map[string]cluster.PrimaryIfAddr{
	"n1": {V4: netip.MustParsePrefix("172.18.0.2/24"), V6: netip.MustParsePrefix("fc00::2/64")},
	"n2": {V4: netip.MustParsePrefix("172.18.0.3/24"), V6: netip.MustParsePrefix("fc00::3/64")},
	"n3": {V4: netip.MustParsePrefix("172.19.5.7/24"), V6: netip.MustParsePrefix("fc01::7/64")},
	"n4": {V6: netip.MustParsePrefix("fc02::9/64")},
}

// The choice per egress node: direct on this node's primary network, the tunnel beyond it (auto);
// one of them always when forced. IPv6 next hops go through the IPv4 underlay.
func TestUnderlayHop(t *testing.T) {
	a := netip.MustParseAddr
	tun := func(via string) dataplane.Nexthop {
		return dataplane.Nexthop{Gateway: a(via), Device: dataplane.TunnelDevice, Onlink: true}
	}
	// IPv6 goes to the link-local gateway of the node's tunnel MAC, from its IPv4 underlay.
	tun6 := func(underlay string) dataplane.Nexthop {
		return dataplane.Nexthop{Gateway: dataplane.TunnelGateway6(a(underlay)), Device: dataplane.TunnelDevice}
	}
	direct := func(via string) dataplane.Nexthop { return dataplane.Nexthop{Gateway: a(via)} }
	for _, tc := range []struct {
		mode SteeringMode
		via  string
		want dataplane.Nexthop
	}{
		{SteerAuto, "172.18.0.3", direct("172.18.0.3")},
		{SteerAuto, "fc00::3", direct("fc00::3")},
		{SteerAuto, "172.19.5.7", tun("172.19.5.7")},
		{SteerAuto, "fc01::7", tun6("172.19.5.7")},
		{"", "172.19.5.7", tun("172.19.5.7")}, // unset is auto
		{SteerVXLAN, "172.18.0.3", tun("172.18.0.3")},
		{SteerVXLAN, "fc00::3", tun6("172.18.0.3")},
		{SteerDirect, "172.19.5.7", direct("172.19.5.7")},
		// n4 has no IPv4 address to reach it by over n1's IPv4 underlay: direct.
		{SteerVXLAN, "fc02::9", direct("fc02::9")},
		// Not a node's primary address (a gateway of some other kind): direct.
		{SteerVXLAN, "172.18.0.99", direct("172.18.0.99")},
	} {
		u := newUnderlay(tc.mode, "n1", testPrimaries)
		if got := u.hop(a(tc.via)); got != tc.want {
			t.Errorf("mode %q via %s: hop %+v, want %+v", tc.mode, tc.via, got, tc.want)
		}
	}
}

// The tunnel state: the peers the hops use (both families' next hops of a node on one peer,
// over the IPv4 underlay), and the device on an egress node only while some node would send
// through it.
func TestUnderlayState(t *testing.T) {
	a := netip.MustParseAddr
	node := func(n string) dataplane.Origin { return dataplane.Origin{Kind: cluster.KindNode, Name: n} }

	u := newUnderlay(SteerAuto, "n1", testPrimaries)
	for _, via := range []string{"172.18.0.3", "fc01::7", "172.19.5.7", "fc00::3"} {
		u.hop(a(via))
	}
	want := dataplane.TunnelState{Origin: node("n1"), Local: a("172.18.0.2"), Peers: []dataplane.TunnelPeer{
		{Origin: node("n3"), Underlay: a("172.19.5.7"), Nexthops: []netip.Addr{a("172.19.5.7"), dataplane.TunnelGateway6(a("172.19.5.7"))}}}}
	if got := u.state(false); !reflect.DeepEqual(got, want) {
		t.Errorf("auto, steering to n2 and n3:\n got %+v\nwant %+v", got, want)
	}

	onOneNetwork := map[string]cluster.PrimaryIfAddr{"n1": testPrimaries["n1"], "n2": testPrimaries["n2"]}
	for _, tc := range []struct {
		name      string
		mode      SteeringMode
		primaries map[string]cluster.PrimaryIfAddr
		receives  bool
		local     string
	}{
		{"auto, egress node, every node on its network: no device", SteerAuto, onOneNetwork, true, ""},
		{"auto, egress node, a node beyond its network: device", SteerAuto, testPrimaries, true, "172.18.0.2"},
		{"auto, not an egress node, nothing steered: no device", SteerAuto, testPrimaries, false, ""},
		{"vxlan, egress node: device", SteerVXLAN, onOneNetwork, true, "172.18.0.2"},
		{"vxlan, not an egress node, nothing steered: no device", SteerVXLAN, onOneNetwork, false, ""},
		{"direct, egress node: no device", SteerDirect, testPrimaries, true, ""},
	} {
		var want dataplane.TunnelState
		if tc.local != "" {
			want = dataplane.TunnelState{Origin: node("n1"), Local: a(tc.local)}
		}
		if got := newUnderlay(tc.mode, "n1", tc.primaries).state(tc.receives); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, want)
		}
	}

	// An IPv6-only node tunnels over IPv6.
	u = newUnderlay(SteerVXLAN, "n4", testPrimaries)
	if got := u.hop(a("fc00::3")); got.Device != dataplane.TunnelDevice {
		t.Fatalf("IPv6-only node to n2: hop %+v, want the tunnel", got)
	}
	if got := u.state(false); got.Local != a("fc02::9") || len(got.Peers) != 1 || got.Peers[0].Underlay != a("fc00::3") {
		t.Errorf("IPv6-only node: %+v, want local fc02::9 and peer n2 at fc00::3", got)
	}
}

// merge sends the tunnel's next hops to the routes and the leak guard's nexthops, and the
// tunnel state to the dataplane.
func TestMergeVXLANSteering(t *testing.T) {
	a := netip.MustParseAddr
	eipO := dataplane.Origin{Kind: cluster.KindEgressIP, Name: "eip"}
	p := &parts{
		pods: []dataplane.Pod{{Origin: dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "p"}, IPs: []netip.Addr{a("10.244.1.5"), a("fd00:10:244:1::5")}}},
		egressIP: egressip.Part{
			Steer: []cluster.Steer{{Origin: eipO, PodIP: a("10.244.1.5"), Via: []netip.Addr{a("172.19.5.7")}},
				{Origin: eipO, PodIP: a("fd00:10:244:1::5"), Via: []netip.Addr{a("fc01::7")}}},
			Guarded:   []netip.Addr{a("10.244.1.5"), a("fd00:10:244:1::5")},
			Primaries: testPrimaries,
		},
	}
	s, _ := merge(nil, nil, nil, p, &steering{node: "n1"}, &mergeMemo{}, dataplane.DefaultMarkMask)
	if len(s.Routing.Tables) != 1 {
		t.Fatalf("tables %+v, want one", s.Routing.Tables)
	}
	for _, r := range s.Routing.Tables[0].Routes {
		if r.Via == nil || r.Via.Device != dataplane.TunnelDevice {
			t.Errorf("route %+v, want via the tunnel device", r)
		}
	}
	if s.Tunnel.Local != a("172.18.0.2") || len(s.Tunnel.Peers) != 1 {
		t.Errorf("tunnel %+v, want local 172.18.0.2 and one peer", s.Tunnel)
	}
	mk := mark(1, dataplane.DefaultMarkMask)
	want := []dataplane.SteerNexthop{{Mark: mk, Nexthop: a("172.19.5.7")}, {Mark: mk, Nexthop: dataplane.TunnelGateway6(a("172.19.5.7"))}}
	if !reflect.DeepEqual(s.Nftables.SteerNexthops, want) {
		t.Errorf("guard nexthops %+v, want %+v", s.Nftables.SteerNexthops, want)
	}
}

// Paths beyond the node's steering slots get none: their pods carry no mark and stay guarded
// (dropped, never leaked), and their objects fail with the reason; a slot freed goes to them.
func TestMergeOutOfSteeringSlots(t *testing.T) {
	a := netip.MustParseAddr
	const mask = 0x00010000 // one slot
	eipA, eipB := dataplane.Origin{Kind: cluster.KindEgressIP, Name: "eip-a"}, dataplane.Origin{Kind: cluster.KindEgressIP, Name: "eip-b"}
	podA, podB := dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "pa"}, dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "pb"}
	p := &parts{
		pods: []dataplane.Pod{{Origin: podA, IPs: []netip.Addr{a("10.244.1.5")}}, {Origin: podB, IPs: []netip.Addr{a("10.244.1.6")}}},
		egressIP: egressip.Part{
			Steer: []cluster.Steer{{Origin: eipA, PodIP: a("10.244.1.5"), Via: []netip.Addr{a("172.18.0.3")}},
				{Origin: eipB, PodIP: a("10.244.1.6"), Via: []netip.Addr{a("172.18.0.3")}}},
			Guarded:   []netip.Addr{a("10.244.1.5"), a("10.244.1.6")},
			Primaries: testPrimaries,
		},
	}
	st, memo := &steering{node: "n1"}, &mergeMemo{}
	s, _ := merge(nil, nil, nil, p, st, memo, mask)
	marks := map[dataplane.Origin]uint32{}
	for _, pod := range s.Classifier.Pods {
		marks[pod.Origin] = pod.Mark
	}
	if marks[podA] == 0 || marks[podB] != 0 {
		t.Errorf("marks %v: want pa steered (eip-a first), pb not", marks)
	}
	if !slices.Contains(s.Nftables.Guarded, a("10.244.1.6")) {
		t.Errorf("pb, not steered, is not guarded: %v", s.Nftables.Guarded)
	}
	failed := st.unplacedFailures(mask)
	if len(failed) != 1 || failed[eipB] == nil || !strings.Contains(failed[eipB].Error(), "no steering slot left on node n1 (at most 1 egress paths") {
		t.Errorf("failures %v, want eip-b's", failed)
	}
	// eip-a goes: eip-b gets the slot.
	p.egressIP.Steer = p.egressIP.Steer[1:]
	s, _ = merge(nil, nil, nil, p, st, memo, mask)
	if len(st.unplacedFailures(mask)) != 0 || len(s.Routing.Tables) != 1 || s.Routing.Tables[0].Origin != eipB {
		t.Errorf("after eip-a went: failures %v, tables %+v", st.unplacedFailures(mask), s.Routing.Tables)
	}
}

// TestSteeringSlotsFitTheRoutingRanges: with a mark mask of more values than the routing
// ranges hold, the 100th path gets no slot (reported as such) rather than a rule and table
// offset dataplane/routing refuses (offsets 1..99 of 100 tables; offset 0 is EgressService's).
func TestSteeringSlotsFitTheRoutingRanges(t *testing.T) {
	const mask = 0xff0000
	var paths []path
	for i := range 100 {
		paths = append(paths, path{origin: dataplane.Origin{Kind: cluster.KindEgressIP, Name: fmt.Sprintf("eip-%03d", i)}})
	}
	st := &steering{node: "n1"}
	slots := st.plan(paths, mask)
	highest := 0
	for _, slot := range slots {
		highest = max(highest, slot)
	}
	cfg := routing.DefaultConfig()
	if len(slots) != 99 || highest >= cfg.TableCount || highest >= cfg.RulePriorityCount || len(st.unplacedFailures(mask)) != 1 {
		t.Errorf("%d slots placed, the highest %d (routing: %d tables, %d rule priorities), %d unplaced; want 99 placed below both, 1 unplaced",
			len(slots), highest, cfg.TableCount, cfg.RulePriorityCount, len(st.unplacedFailures(mask)))
	}
}
