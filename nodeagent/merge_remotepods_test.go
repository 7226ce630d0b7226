package nodeagent

import (
	"net/netip"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/nodeagent/externalroute"
)

// Other nodes' pod networks are guarded while some pod is served, or some EgressIP assigned
// (their packets may be steered here, also just after this node stopped serving them and
// forgot those pods), and not on a node that is an external gateway: other nodes' pods leave
// through it.
func TestMergeRemotePods(t *testing.T) {
	a, pfx := netip.MustParseAddr, netip.MustParsePrefix
	remote := []netip.Prefix{pfx("10.244.2.0/24")}
	self := cluster.PrimaryIfAddr{V4: pfx("192.0.2.1/24")}
	eip := func(guarded ...netip.Addr) egressip.Part {
		return egressip.Part{Guarded: guarded, RemotePods: remote, Primaries: map[string]cluster.PrimaryIfAddr{"n1": self}}
	}
	gatewayPolicy := func(gw string) externalroute.Part {
		return externalroute.Part{Policies: []externalroute.Policy{{Origin: dataplane.Origin{Kind: cluster.KindExternalRoute, Name: "gws"},
			Gateways: []netip.Addr{a(gw)}}}}
	}
	for _, c := range []struct {
		name string
		p    parts
		want int
	}{
		{"a served pod somewhere", parts{egressIP: eip(a("10.244.2.5"))}, 1},
		{"nothing served", parts{egressIP: eip()}, 0},
		{"an EgressIP assigned, no pod known here", parts{egressIP: func() egressip.Part { p := eip(); p.Assigned = true; return p }()}, 1},
		{"another node is a gateway", parts{egressIP: eip(a("10.244.2.5")), routes: gatewayPolicy("192.0.2.2")}, 1},
		{"this node is a gateway", parts{egressIP: eip(a("10.244.2.5")), routes: gatewayPolicy("192.0.2.1")}, 0},
	} {
		s, _ := merge(nil, nil, nil, &c.p, &steering{node: "n1"}, &mergeMemo{}, dataplane.DefaultMarkMask)
		if len(s.Nftables.RemotePods) != c.want {
			t.Errorf("%s: remote pods %v, want %d prefixes", c.name, s.Nftables.RemotePods, c.want)
		}
	}
}
