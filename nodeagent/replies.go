package nodeagent

import (
	"net/netip"
	"slices"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// kindReplies is the kind of the one slot of the replies to other nodes' pods that this node
// SNATs (EgressIP, EgressService).
const kindReplies dataplane.Kind = "RemotePodReplies"

// The other nodes' pods this node SNATs send their packets here by egressd's steering
// (directly, or through its tunnel); the replies of those connections go back the same way: a
// mark on the reply (nftables, before the SNAT is undone) and a table that routes each node's
// pod networks to that node as steered packets come from it. Through the CNI instead, a CNI
// that delivers its overlay's packets to the pod in BPF (Cilium) takes them past the pod's
// node's netfilter, whose conntrack then never sees the answer: kube-proxy's iptables mode
// drops the pod's next packet as invalid, and Cilium does not undo the ClusterIP translation
// of a Service connection.

// remoteSNAT are the pods of snat that are not local, in order.
func remoteSNAT(snat []dataplane.SNAT, local map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(snat))
	for _, s := range snat {
		if !local[s.Pod] {
			out = append(out, s.Pod)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// replyRouting is the rule of both families for the replies' slot and its table: each other
// node's pod networks through the hop to that node's primary address of the family.
func replyRouting(o dataplane.Origin, slot int, mask uint32, podsOf map[string][]netip.Prefix, nodes []string, primaries map[string]cluster.PrimaryIfAddr, hop func(netip.Addr) dataplane.Nexthop) ([]dataplane.RouteRule, dataplane.RouteTable) {
	table := dataplane.RouteTable{Origin: o, ID: slot}
	for _, node := range nodes {
		for _, p := range podsOf[node] {
			via := primaries[node].V4.Addr()
			if p.Addr().Is6() {
				via = primaries[node].V6.Addr()
			}
			if !via.IsValid() {
				continue
			}
			h := hop(via)
			table.Routes = append(table.Routes, dataplane.Route{Dst: p, Via: &h})
		}
	}
	var rules []dataplane.RouteRule
	for _, v6 := range []bool{false, true} {
		rules = append(rules, dataplane.RouteRule{Origin: o, Priority: slot, IPv6: v6, Mark: mark(slot, mask), Mask: mask, Table: slot})
	}
	return rules, table
}
