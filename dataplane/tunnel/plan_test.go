package tunnel

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/internal/golden"
)

// renderPlan renders the entries Apply wants on the tunnel device for s, per peer, as
// `bridge fdb` and `ip neigh` would list them, or why a peer gets none.
func renderPlan(s *dataplane.TunnelState) string {
	var b strings.Builder
	for _, p := range planPeers(s) {
		fmt.Fprintf(&b, "peer %s underlay %s\n", p.Origin, p.Underlay)
		if p.err != nil {
			fmt.Fprintf(&b, "\terror: %v\n", p.err)
			continue
		}
		fmt.Fprintf(&b, "\tfdb %s dst %s self permanent\n", p.mac, p.Underlay)
		for _, nh := range p.Nexthops {
			fmt.Fprintf(&b, "\tneigh %s lladdr %s nud permanent\n", nh, p.mac)
		}
	}
	return b.String()
}

func node(name, underlay string, nexthops ...netip.Addr) dataplane.TunnelPeer {
	return dataplane.TunnelPeer{Origin: dataplane.Origin{Kind: "Node", Name: name}, Underlay: netip.MustParseAddr(underlay), Nexthops: nexthops}
}

// TestPlanGolden: each egress node reached through the tunnel gets a forwarding entry to its
// underlay address and a neighbour entry per nexthop address routes use (its IPv4 address, its
// IPv6 link-local gateway), all naming the MAC derived from its underlay address; a peer of the
// other family is refused, and a peer listed twice is the same entries.
func TestPlanGolden(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name string
		s    dataplane.TunnelState
	}{
		{"ipv4-underlay", dataplane.TunnelState{Local: a("192.0.2.1"), Peers: []dataplane.TunnelPeer{
			node("node-b", "192.0.2.2", a("192.0.2.2"), dataplane.TunnelGateway6(a("192.0.2.2"))),
			node("node-c", "192.0.2.3", a("192.0.2.3")),
			node("node-v6", "2001:db8::4", a("2001:db8::4")),
			node("node-b", "192.0.2.2", a("192.0.2.2")),
		}}},
		{"ipv6-underlay", dataplane.TunnelState{Local: a("2001:db8::1"), Peers: []dataplane.TunnelPeer{
			node("node-b", "2001:db8::2", dataplane.TunnelGateway6(a("2001:db8::2"))),
			node("node-v4", "192.0.2.3", a("192.0.2.3")),
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden.Assert(t, "testdata/plan-"+tc.name+".golden", renderPlan(&tc.s))
		})
	}
}
