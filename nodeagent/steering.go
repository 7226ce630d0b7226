package nodeagent

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"sort"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/nodeagent/externalroute"
)

// maxSteerSlots bounds the egress paths a node steers through at once: one routing table and
// one rule per path, inside the ranges dataplane/routing reserves by default (a slot is both
// offsets, 1..99: offset 0 is EgressService's networks').
const maxSteerSlots = 99

// path sends one family of a local pod's traffic, marked by the classifier, through next hops
// (per-flow ECMP when several): the egress nodes of its EgressIP, or the gateways of its
// AdminPolicyBasedExternalRoute.
type path struct {
	origin dataplane.Origin // the object the path is of
	podIP  netip.Addr
	hops   []dataplane.Nexthop
	spread uint8 // cluster.Steer.Spread
	// link, instead of hops, is an egress IP of this node on a secondary network: the path
	// leaves through the interface holding it (the pod is local or of another node).
	link netip.Addr
}

// steeredPaths are the paths of the pods' addresses: the local pods' to the egress nodes of
// their EgressIP, by the next hop reach gives for each node's address (direct or through the
// tunnel); those of any node SNATed to an egress IP of this node on a secondary network,
// through its interface; else the local pods' through the gateways of their external route
// policy (BFD gated where the hop asks for it). EgressIP wins, as in upstream's shared-gateway
// mode: its reroute on the cluster router comes before the external route's static routes on
// the pod node's gateway router, which only traffic leaving on that node meets; a pod whose
// egress IP is on its own node, in its primary network, still leaves through the gateways,
// SNATed to the egress IP.
func steeredPaths(steers []cluster.Steer, eip egressip.Part, routes []externalroute.Route, reach func(netip.Addr) dataplane.Nexthop) []path {
	out := make([]path, 0, len(steers)+len(routes))
	taken := map[netip.Addr]bool{}
	routed := map[netip.Addr]bool{}
	for _, r := range routes {
		routed[r.PodIP] = true
	}
	for _, st := range steers {
		if st.Spread > 1 && routed[st.PodIP] {
			continue // it leaves here, through its gateways, SNATed to this node's egress IP
		}
		p := path{origin: st.Origin, podIP: st.PodIP, spread: st.Spread}
		for _, via := range st.Via {
			p.hops = append(p.hops, reach(via))
		}
		out = append(out, p)
		taken[st.PodIP] = true
	}
	for _, n := range eip.SNAT {
		if slices.Contains(eip.Secondary, n.To) && !taken[n.Pod] {
			out = append(out, path{origin: n.Origin, podIP: n.Pod, link: n.To})
			taken[n.Pod] = true
		}
	}
	for _, r := range routes {
		if taken[r.PodIP] {
			continue
		}
		p := path{origin: r.Origin, podIP: r.PodIP}
		for _, gw := range r.Gateways {
			p.hops = append(p.hops, dataplane.Nexthop{Gateway: gw.IP, BFD: gw.BFD})
		}
		out = append(out, p)
	}
	return out
}

// kindGateway is the kind of the slots of gateways' return paths, one per gateway address.
const kindGateway dataplane.Kind = "ExternalGateway"

// returnPaths are the return paths of the external routes' gateways: for each gateway, one
// path per local pod address it serves, to itself alone. They get a slot (a mark, a rule and a
// table through the gateway) like any path, but no pod carries their mark: nftables gives it to
// the replies of connections that arrived from the gateway (upstream's ecmp_symmetric_reply).
func returnPaths(paths []path) []path {
	bfd := map[netip.Addr]bool{}
	for _, p := range paths {
		if p.origin.Kind == cluster.KindExternalRoute {
			for _, h := range p.hops {
				bfd[h.Gateway] = bfd[h.Gateway] || h.BFD
			}
		}
	}
	var out []path
	for _, p := range paths {
		if p.origin.Kind != cluster.KindExternalRoute {
			continue
		}
		for _, h := range p.hops {
			out = append(out, path{origin: dataplane.Origin{Kind: kindGateway, Name: h.Gateway.String()}, podIP: p.podIP,
				hops: []dataplane.Nexthop{{Gateway: h.Gateway, BFD: bfd[h.Gateway]}}})
		}
	}
	return out
}

// returnPathState is the nftables side of the return paths that got a slot.
func returnPathState(returns []path, slots map[dataplane.Origin]int, mask uint32) []dataplane.ReturnPath {
	var out []dataplane.ReturnPath
	index := map[dataplane.Origin]int{}
	for _, p := range returns {
		slot, ok := slots[p.origin]
		if !ok {
			continue
		}
		i, seen := index[p.origin]
		if !seen {
			i = len(out)
			index[p.origin] = i
			out = append(out, dataplane.ReturnPath{Origin: p.origin, Gateway: p.hops[0].Gateway, BFD: p.hops[0].BFD, Mark: mark(slot, mask)})
		}
		out[i].Pods = append(out[i].Pods, p.podIP)
	}
	for i := range out { // a gateway may return to thousands of pods: sorted, not searched
		slices.SortFunc(out[i].Pods, netip.Addr.Compare)
		out[i].Pods = slices.Compact(out[i].Pods)
	}
	slices.SortFunc(out, func(a, b dataplane.ReturnPath) int { return a.Gateway.Compare(b.Gateway) })
	return out
}

// bfdPeers are the gateways whose hops ask for BFD, one session each (default timers).
func bfdPeers(routes []externalroute.Route) []dataplane.BFDPeer {
	var out []dataplane.BFDPeer
	seen := map[netip.Addr]bool{}
	for _, r := range routes {
		for _, gw := range r.Gateways {
			if gw.BFD && !seen[gw.IP] {
				seen[gw.IP] = true
				out = append(out, dataplane.BFDPeer{Origin: r.Origin, Peer: gw.IP})
			}
		}
	}
	slices.SortFunc(out, func(a, b dataplane.BFDPeer) int { return a.Peer.Compare(b.Peer) })
	return out
}

// steering allocates a slot to every path origin local pods are steered through: its mark, the
// offset of its rules and its table. A path keeps its slot for as long
// as it is used, so a pod's mark does not change under it. Egress nodes are reached as mode
// says ("" is auto).
type steering struct {
	mode  SteeringMode
	node  string // this node's name
	slots map[dataplane.Origin]int
	// unplaced are the path origins the last plan found no slot for, in order.
	unplaced []dataplane.Origin
}

// mark is the mark of slot under mask: slot numbers shifted into the mask's lowest bits.
func mark(slot int, mask uint32) uint32 { return uint32(slot) << bits.TrailingZeros32(mask) }

// capacity is how many slots fit: the marks the mask can hold (0 is none), and the tables.
func capacity(mask uint32) int {
	return min(int(mask>>bits.TrailingZeros32(mask)), maxSteerSlots)
}

// plan gives each path of steers a slot, keeping the slots of paths still used; paths beyond
// capacity get none (their pods are not steered, and guarded: dropped rather than leaked).
func (s *steering) plan(paths []path, mask uint32) map[dataplane.Origin]int {
	used := map[dataplane.Origin]bool{}
	for _, p := range paths {
		used[p.origin] = true
	}
	next := map[dataplane.Origin]int{}
	taken := map[int]bool{}
	for o, slot := range s.slots {
		if used[o] {
			next[o] = slot
			taken[slot] = true
		}
	}
	var fresh []dataplane.Origin
	for o := range used {
		if _, ok := next[o]; !ok {
			fresh = append(fresh, o)
		}
	}
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].String() < fresh[j].String() })
	slot := 1
	s.unplaced = nil
	for i, o := range fresh {
		for taken[slot] {
			slot++
		}
		if slot > capacity(mask) {
			s.unplaced = fresh[i:]
			break
		}
		next[o] = slot
		taken[slot] = true
	}
	s.slots = next
	return next
}

// unplacedFailures are the failures of the paths the last plan found no slot for: their objects
// must say so (their pods are not steered; those an EgressIP serves are dropped, never leaked).
func (s *steering) unplacedFailures(mask uint32) map[dataplane.Origin]error {
	out := map[dataplane.Origin]error{}
	for _, o := range s.unplaced {
		out[o] = fmt.Errorf("no steering slot left on node %s (at most %d egress paths per node with mark mask %#x): its pods there are not steered",
			s.node, capacity(mask), mask)
	}
	return out
}

// steeringRoutes is the policy routing of the paths: per slot, `fwmark <mark>/<mask> lookup
// <table>` for both families, and a table whose default route spreads flows over the next hops,
// or that copies the routes of an egress IP's interface (blackhole for a family without
// either: a marked packet never falls through to main). Each table also throws the IPv6
// cluster networks (pods, services) on to main: no marked packet goes there (the classifier
// leaves them unmarked), but a reverse path check that looks the packet's source up with its
// mark does. firewalld's IPv6_rpfilter (`fib saddr . mark . iif oif missing drop`, or
// ip6tables' `rpfilter --validmark`) would otherwise find a steered pod's own address
// through the path's gateway, not through the pod's interface, and drop every packet of it.
// IPv4's reverse path filter ignores the mark (unless src_valid_mark) and gets no throw.
func steeringRoutes(paths []path, slots map[dataplane.Origin]int, mask uint32, networks []netip.Prefix) dataplane.RoutingState {
	hops := map[dataplane.Origin]map[bool][]dataplane.Nexthop{} // by family (true: IPv4)
	links := map[dataplane.Origin]map[bool]netip.Addr{}
	for _, p := range paths {
		if _, ok := slots[p.origin]; !ok {
			continue
		}
		if hops[p.origin] == nil {
			hops[p.origin] = map[bool][]dataplane.Nexthop{}
			links[p.origin] = map[bool]netip.Addr{}
		}
		v4 := p.podIP.Is4()
		if p.link.IsValid() {
			links[p.origin][v4] = p.link
		}
		for _, h := range p.hops {
			if !slices.Contains(hops[p.origin][v4], h) {
				hops[p.origin][v4] = append(hops[p.origin][v4], h)
			}
		}
	}
	var rs dataplane.RoutingState
	origins := make([]dataplane.Origin, 0, len(hops))
	for o := range hops {
		origins = append(origins, o)
	}
	sort.Slice(origins, func(i, j int) bool { return slots[origins[i]] < slots[origins[j]] })
	for _, o := range origins {
		slot := slots[o]
		table := dataplane.RouteTable{Origin: o, ID: slot}
		for _, v4 := range []bool{true, false} {
			rs.Rules = append(rs.Rules, dataplane.RouteRule{Origin: o, Priority: slot, IPv6: !v4, Mark: mark(slot, mask), Mask: mask, Table: slot})
			dst := netip.MustParsePrefix("0.0.0.0/0")
			if !v4 {
				dst = netip.MustParsePrefix("::/0")
			}
			hs := hops[o][v4]
			slices.SortFunc(hs, func(a, b dataplane.Nexthop) int { return a.Gateway.Compare(b.Gateway) })
			switch link := links[o][v4]; {
			case link.IsValid():
				table.LinkOf = append(table.LinkOf, link)
			case len(hs) == 0:
				table.Routes = append(table.Routes, dataplane.Route{Dst: dst, Blackhole: true})
			case len(hs) == 1:
				table.Routes = append(table.Routes, dataplane.Route{Dst: dst, Via: &hs[0]})
			default:
				table.Routes = append(table.Routes, dataplane.Route{Dst: dst, Nexthops: hs})
			}
		}
		for _, n := range networks {
			if n.Addr().Is6() && n.Bits() > 0 {
				table.Routes = append(table.Routes, dataplane.Route{Dst: n.Masked(), Throw: true})
			}
		}
		rs.Tables = append(rs.Tables, table)
	}
	return rs
}
