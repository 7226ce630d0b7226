package nodeagent

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// TestReversePathMarks: every steering table throws the IPv6 cluster networks on to main (and
// no IPv4 one, nor a default route); the IPv6 egress IPs on a secondary network get their
// path's mark, once each, and IPv4 ones none.
func TestReversePathMarks(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	eip := dataplane.Origin{Kind: cluster.KindEgressIP, Name: "e"}
	eip4 := dataplane.Origin{Kind: cluster.KindEgressIP, Name: "e4"}
	paths := []path{
		{origin: eip, podIP: a("fd00:10:244::5"), link: a("2001:db8:abcd::106")},
		{origin: eip, podIP: a("fd00:10:244:1::7"), link: a("2001:db8:abcd::106")},
		{origin: eip4, podIP: a("10.244.0.5"), link: a("10.10.10.100")},
	}
	slots := map[dataplane.Origin]int{eip: 1, eip4: 2}
	const mask = 0x00ff0000
	networks := []netip.Prefix{p("10.244.0.0/16"), p("fd00:10:244::/48"), p("fd00:96::/108"), p("::/0")}
	rs := steeringRoutes(paths, slots, mask, networks)
	for _, table := range rs.Tables {
		var throws []netip.Prefix
		for _, r := range table.Routes {
			if r.Throw {
				throws = append(throws, r.Dst)
			}
		}
		if want := []netip.Prefix{p("fd00:10:244::/48"), p("fd00:96::/108")}; !slices.Equal(throws, want) {
			t.Errorf("table %d throws %v, want %v", table.ID, throws, want)
		}
	}
	got := secondaryMarks(paths, slots, mask)
	if want := []dataplane.SecondaryMark{{EgressIP: a("2001:db8:abcd::106"), Mark: mark(1, mask)}}; !slices.Equal(got, want) {
		t.Errorf("secondary marks %v, want %v", got, want)
	}
}
