package nodeagent

import (
	"net/netip"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/nodeagent/egressservice"
)

// A pod both an EgressIP and an EgressService serve leaves as the EgressService says: its
// steering (and, on the host node, its SNAT) wins; EgressIP keeps its other pods.
func TestMergeEgressServiceBeatsEgressIP(t *testing.T) {
	a := netip.MustParseAddr
	eipO := dataplane.Origin{Kind: cluster.KindEgressIP, Name: "eip"}
	esO := egressservice.Origin("a", "web")
	both, other := a("10.244.1.5"), a("10.244.1.6")
	p := &parts{
		pods: []dataplane.Pod{{Origin: dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "p"}, IPs: []netip.Addr{both}},
			{Origin: dataplane.Origin{Kind: "Pod", Namespace: "a", Name: "q"}, IPs: []netip.Addr{other}}},
		egressIP: egressip.Part{
			Steer:   []cluster.Steer{{Origin: eipO, PodIP: both, Via: []netip.Addr{a("192.0.2.2")}}, {Origin: eipO, PodIP: other, Via: []netip.Addr{a("192.0.2.2")}}},
			SNAT:    []dataplane.SNAT{{Origin: eipO, Pod: a("10.244.2.7"), To: a("192.0.2.100")}},
			Guarded: []netip.Addr{both, other}, Exempt: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		},
		service: egressservice.Part{
			Steer:   []cluster.Steer{{Origin: esO, PodIP: both, Via: []netip.Addr{a("192.0.2.3")}}},
			SNAT:    []dataplane.SNAT{{Origin: esO, Pod: a("10.244.2.7"), To: a("172.18.0.210")}},
			Served:  []netip.Addr{both, a("10.244.2.7")},
			Guarded: []netip.Addr{both, a("10.244.2.7")}, Exempt: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("192.0.2.3/32")},
		},
	}
	s, _ := merge(nil, nil, nil, p, &steering{}, &mergeMemo{}, dataplane.DefaultMarkMask)
	marks := map[netip.Addr]uint32{}
	for _, pod := range s.Classifier.Pods {
		for _, ip := range pod.IPs {
			marks[ip] = pod.Mark
		}
	}
	var esTable, eipTable int
	for _, tb := range s.Routing.Tables {
		if tb.Origin == esO {
			esTable = tb.ID
			if tb.Routes[0].Via == nil || tb.Routes[0].Via.Gateway != a("192.0.2.3") {
				t.Errorf("EgressService table routes %+v, want via 192.0.2.3", tb.Routes)
			}
		} else if tb.Origin == eipO {
			eipTable = tb.ID
		}
	}
	if esTable == 0 || eipTable == 0 || marks[both] != mark(esTable, dataplane.DefaultMarkMask) || marks[other] != mark(eipTable, dataplane.DefaultMarkMask) {
		t.Errorf("marks %v, tables es %d eip %d: want the shared pod on the EgressService's path, the other on EgressIP's", marks, esTable, eipTable)
	}
	if len(s.Nftables.SNAT) != 1 || s.Nftables.SNAT[0].Origin != esO {
		t.Errorf("SNAT %+v, want only the EgressService's", s.Nftables.SNAT)
	}
	if len(s.Nftables.Guarded) != 3 || len(s.Nftables.Exempt) != 2 || len(s.Classifier.SteerExempt) != 2 {
		t.Errorf("guarded %v exempt %v steer exempt %v: want the union", s.Nftables.Guarded, s.Nftables.Exempt, s.Classifier.SteerExempt)
	}
}
