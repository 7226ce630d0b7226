package nodeagent

import (
	"net/netip"
	"slices"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressfirewall"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/nodeagent/egressqos"
	"github.com/egressd/egressd/nodeagent/egressservice"
	"github.com/egressd/egressd/nodeagent/externalroute"
)

// parts are the features' compiled parts of the node state.
type parts struct {
	pods     []dataplane.Pod
	firewall egressfirewall.Part
	qos      egressqos.Part
	egressIP egressip.Part
	routes   externalroute.Part
	service  egressservice.Part
}

// merge combines the parts into the node's desired state. It owns what crosses features: a
// pod's entry carries what every feature wants of it. It also returns the objects the state was
// compiled from that are reported on (NodeReport), with their compile errors.
func merge(networks, vips []netip.Prefix, frontends []dataplane.Frontend, p *parts, st *steering, m *mergeMemo, mask uint32) (dataplane.State, cluster.Outcomes) {
	objects := cluster.NewOutcomes(p.firewall.Statuses)
	s := dataplane.State{Classifier: dataplane.ClassifierState{
		ClusterNetworks:  networks,
		Frontends:        frontends,
		Firewalls:        p.firewall.Firewalls,
		FirewallsVersion: p.firewall.Version,
		QoS:              localQoS(p.qos.QoS, p.pods),
	}}
	eip := m.withoutServed(p.egressIP, p.service.Served)
	mode := st.mode
	if p.egressIP.Cloud && mode != SteerDirect { // auto (the zero value too)
		mode = SteerVXLAN // a cloud drops a pod source on the wire even between VMs of one subnet
	}
	u := newUnderlay(mode, st.node, p.egressIP.Primaries)
	paths := steeredPaths(append(append([]cluster.Steer{}, p.service.Steer...), eip.Steer...), eip, p.routes.Routes, u.hop)
	returns := returnPaths(paths)
	local := make(map[netip.Addr]bool, len(p.pods))
	for _, pod := range p.pods {
		for _, ip := range pod.IPs {
			local[ip] = true
		}
	}
	replies := dataplane.Origin{Kind: kindReplies, Name: st.node}
	snat := m.snat(p.service.SNAT, eip.SNAT)
	remote := m.remoteSNAT(snat, local)
	planned := append(slices.Clip(paths), returns...)
	if len(remote) > 0 {
		planned = append(planned, path{origin: replies})
	}
	slots := st.plan(planned, mask)
	marks, spreads := map[netip.Addr]uint32{}, map[netip.Addr]uint8{}
	for _, path := range paths {
		if slot, ok := slots[path.origin]; ok && marks[path.podIP] == 0 {
			marks[path.podIP], spreads[path.podIP] = mark(slot, mask), path.spread
			if path.spread > 1 {
				s.Nftables.Spread = append(s.Nftables.Spread, path.podIP)
			}
			s.Nftables.Steered = append(s.Nftables.Steered, dataplane.SteeredPod{Pod: path.podIP, Mark: mark(slot, mask), Remote: !local[path.podIP]})
		}
	}
	slices.SortFunc(s.Nftables.Steered, func(a, b dataplane.SteeredPod) int { return a.Pod.Compare(b.Pod) })
	slices.SortFunc(s.Nftables.Spread, netip.Addr.Compare)
	s.Classifier.Pods = make([]dataplane.Pod, 0, len(p.pods))
	for _, pod := range p.pods {
		pod.QoSRules = p.qos.PodRules[pod.Origin]
		s.Classifier.Pods = appendByMark(s.Classifier.Pods, pod, marks, spreads)
	}
	s.Classifier.SteerExempt = p.egressIP.Exempt
	s.Nftables.BackendDenies = p.firewall.BackendDenies
	firewalled := map[string]bool{}
	for _, fw := range p.firewall.Firewalls {
		firewalled[fw.Origin.Namespace] = true
		if fw.Err != nil {
			s.Nftables.KeepBackendDenies = append(s.Nftables.KeepBackendDenies, fw.Origin.Namespace)
		}
	}
	if len(frontends) > 0 {
		s.Nftables.Frontends = frontends
		for _, pod := range p.pods {
			if firewalled[pod.Origin.Namespace] {
				s.Nftables.FirewalledPods = append(s.Nftables.FirewalledPods, pod.IPs...)
			}
		}
		slices.SortFunc(s.Nftables.FirewalledPods, netip.Addr.Compare)
	}
	s.Nftables.BackendDSCP = p.qos.BackendDSCP
	for _, q := range p.qos.QoS {
		objects.Set(q.Origin, q.Err)
		if q.Err != nil {
			s.Nftables.KeepBackendDSCP = append(s.Nftables.KeepBackendDSCP, q.Origin.Namespace)
		}
	}
	for _, r := range p.routes.Policies {
		objects.Set(r.Origin, r.Err)
	}
	s.BFD = bfdPeers(p.routes.Routes)
	s.Addresses = p.egressIP.Addresses
	s.Routing = steeringRoutes(append(slices.Clip(paths), returns...), slots, mask, networks)
	s.Nftables.ReturnPaths = returnPathState(returns, slots, mask)
	// EgressService's networks come first (offset 0, before every steering slot), as upstream's
	// rules at 5000 come before EgressIP's at 6000.
	for _, r := range p.service.Rules {
		s.Routing.Rules = append(s.Routing.Rules, dataplane.RouteRule{Origin: r.Origin, IPv6: r.Src.Is6(),
			Src: netip.PrefixFrom(r.Src, r.Src.BitLen()), Network: r.Network})
	}
	s.Nftables.SteerMask = mask
	s.Nftables.SNAT = snat
	var replyRules []dataplane.RouteRule
	var replyTable dataplane.RouteTable
	if slot, ok := slots[replies]; ok { // before the tunnel's state: its hops may need peers
		replyRules, replyTable = replyRouting(replies, slot, mask, p.egressIP.RemotePodsOf, m.nodesOf(p.egressIP.RemotePodsOf), p.egressIP.Primaries, u.hop)
		s.Nftables.Replies = m.replies(remote, mark(slot, mask))
	}
	s.Tunnel = u.state(len(s.Nftables.SNAT) > 0)
	if len(s.Nftables.SNAT) > 0 {
		s.Routing.SteeredFrom, s.Routing.SteeredPods = u.others4(), p.egressIP.RemotePods
	}
	s.Nftables.Exempt = m.exemptUnion(p.egressIP.Exempt, p.service.Exempt, vips)
	s.Classifier.SteerExempt = s.Nftables.Exempt
	s.Nftables.Guarded = m.guardedUnion(p.egressIP.Guarded, p.service.Guarded)
	s.Nftables.Secondary = p.egressIP.Secondary
	s.Nftables.SecondaryMarks = secondaryMarks(paths, slots, mask)
	// Some pod's packets may be steered to this node: other nodes' pods it does not know are
	// dropped, unless this node is an external gateway of theirs (a host-network gateway pod),
	// which forwards them by design. A node that reads only its own pods (watchers.NodePods)
	// knows no remote pod once it serves none, yet gets their packets from a node that still
	// steers them here: the guard stays while any EgressIP is assigned.
	if (len(s.Nftables.Guarded) > 0 || p.egressIP.Assigned) && !externalGateway(p.routes.Policies, p.egressIP.Primaries[st.node]) {
		s.Nftables.RemotePods = p.egressIP.RemotePods
	}
	for _, t := range s.Routing.Tables {
		for _, r := range t.Routes {
			for _, nh := range r.Nexthops {
				s.Nftables.SteerNexthops = append(s.Nftables.SteerNexthops, dataplane.SteerNexthop{Mark: mark(slots[t.Origin], mask), Nexthop: nh.Gateway})
			}
			if r.Via != nil {
				s.Nftables.SteerNexthops = append(s.Nftables.SteerNexthops, dataplane.SteerNexthop{Mark: mark(slots[t.Origin], mask), Nexthop: r.Via.Gateway})
			}
		}
	}
	// After the steering nexthops: a reply is never judged by the guard.
	if replyTable.Origin == replies {
		s.Routing.Rules, s.Routing.Tables = append(s.Routing.Rules, replyRules...), append(s.Routing.Tables, replyTable)
	}
	return s, objects
}

// secondaryMarks are the marks of the paths through an IPv6 egress IP of this node on a
// secondary network, one per egress IP (dataplane.NftablesState.SecondaryMarks).
func secondaryMarks(paths []path, slots map[dataplane.Origin]int, mask uint32) []dataplane.SecondaryMark {
	var out []dataplane.SecondaryMark
	for _, p := range paths {
		slot, ok := slots[p.origin]
		if !ok || !p.link.Is6() || slices.ContainsFunc(out, func(m dataplane.SecondaryMark) bool { return m.EgressIP == p.link }) {
			continue
		}
		out = append(out, dataplane.SecondaryMark{EgressIP: p.link, Mark: mark(slot, mask)})
	}
	slices.SortFunc(out, func(a, b dataplane.SecondaryMark) int { return a.EgressIP.Compare(b.EgressIP) })
	return out
}

// externalGateway reports whether a policy names this node (its primary address) as a gateway.
func externalGateway(policies []externalroute.Policy, self cluster.PrimaryIfAddr) bool {
	for _, pol := range policies {
		for _, gw := range pol.Gateways {
			if gw == self.V4.Addr() || gw == self.V6.Addr() {
				return true
			}
		}
	}
	return false
}

// appendByMark appends a pod with its steering mark to pods. The classifier holds one entry per
// address, and a dual-stack pod may be steered in one family only (its object has an egress IP
// of the other family on this node, or none): such a pod becomes one entry per mark. A pod
// whose addresses share one mark, nearly every pod, keeps its list of addresses.
func appendByMark(pods []dataplane.Pod, pod dataplane.Pod, marks map[netip.Addr]uint32, spreads map[netip.Addr]uint8) []dataplane.Pod {
	if len(pod.IPs) > 0 {
		m, sp := marks[pod.IPs[0]], spreads[pod.IPs[0]]
		if !slices.ContainsFunc(pod.IPs[1:], func(ip netip.Addr) bool { return marks[ip] != m || spreads[ip] != sp }) {
			pod.Mark, pod.Spread = m, sp
			return append(pods, pod)
		}
	}
	first := len(pods)
	for _, ip := range pod.IPs {
		m, sp := marks[ip], spreads[ip]
		i := slices.IndexFunc(pods[first:], func(p dataplane.Pod) bool { return p.Mark == m && p.Spread == sp })
		if i < 0 {
			part := pod
			part.IPs, part.Mark, part.Spread = nil, m, sp
			pods = append(pods, part)
			i = len(pods) - 1 - first
		}
		pods[first+i].IPs = append(pods[first+i].IPs, ip)
	}
	return pods
}

// localQoS are the EgressQoS of the namespaces of the node's pods, the only ones whose rules the
// classifier marks packets by: with a thousand in the cluster, writing the others' rule texts
// and ids was most of its work at every sync. Every EgressQoS's status still comes from its
// compile; the node's rule listing (egressctl qos) and its counters show the local ones.
func localQoS(all []dataplane.QoS, pods []dataplane.Pod) []dataplane.QoS {
	if len(all) == 0 || len(pods) == 0 {
		return nil
	}
	namespaces := make(map[string]bool, len(pods))
	for _, p := range pods {
		namespaces[p.Origin.Namespace] = true
	}
	var out []dataplane.QoS
	for _, q := range all {
		if namespaces[q.Origin.Namespace] {
			out = append(out, q)
		}
	}
	return out
}

// dnsSnoop are the local pods of the namespaces with dnsName rules, whose DNS answers the agent
// reads on queue (none without a queue).
func dnsSnoop(pods []dataplane.Pod, namespaces []string, queue uint16) dataplane.DNSSnoop {
	if queue == 0 || len(namespaces) == 0 {
		return dataplane.DNSSnoop{}
	}
	out := dataplane.DNSSnoop{Queue: queue}
	for _, p := range pods {
		if slices.Contains(namespaces, p.Origin.Namespace) {
			for _, ip := range p.IPs {
				out.Pods = append(out.Pods, dataplane.SnoopedPod{IP: ip, Namespace: p.Origin.Namespace})
			}
		}
	}
	slices.SortFunc(out.Pods, func(a, b dataplane.SnoopedPod) int { return a.IP.Compare(b.IP) })
	return out
}

// withoutServed is EgressIP's part without the SNAT and steering of the pod addresses an
// EgressService serves: EgressService wins (upstream's reroute priority 101 over EgressIP's 100).
func withoutServed(p egressip.Part, served []netip.Addr) egressip.Part {
	if len(served) == 0 {
		return p
	}
	// A set: an egress node's part holds an entry per served pod (10,000), and EgressServices
	// may serve hundreds.
	isServed := make(map[netip.Addr]bool, len(served))
	for _, a := range served {
		isServed[a] = true
	}
	out := p
	out.SNAT = without(p.SNAT, func(s dataplane.SNAT) bool { return isServed[s.Pod] })
	out.Steer = without(p.Steer, func(s cluster.Steer) bool { return isServed[s.PodIP] })
	return out
}

// without is s without the elements drop says to: s itself when there are none (an egress
// node's 10,000 SNAT entries are not copied for EgressServices that serve other pods), else a
// copy.
func without[S ~[]E, E any](s S, drop func(E) bool) S {
	i := slices.IndexFunc(s, drop)
	if i < 0 {
		return s
	}
	out := make(S, i, len(s)-1)
	copy(out, s[:i])
	for _, e := range s[i+1:] {
		if !drop(e) {
			out = append(out, e)
		}
	}
	return out
}

// union is the union of two lists (the features' Exempt, Guarded), sorted by cmp (a total
// order, 0 only for equal elements), each element once. The features' lists come sorted: they
// are merged in one pass, not sorted again (an egress node's Exempt holds every node's
// addresses, and sorting 5,000 of them was a third of a firewall edit's sync).
func union[T comparable](a, b []T, cmp func(T, T) int) []T {
	if len(b) == 0 {
		return a
	}
	a, b = sorted(a, cmp), sorted(b, cmp)
	out := make([]T, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		var next T
		if len(b) == 0 || len(a) > 0 && cmp(a[0], b[0]) <= 0 {
			next, a = a[0], a[1:]
		} else {
			next, b = b[0], b[1:]
		}
		if len(out) == 0 || out[len(out)-1] != next {
			out = append(out, next)
		}
	}
	return out
}

// sorted is s if sorted by cmp, else a sorted copy.
func sorted[T any](s []T, cmp func(T, T) int) []T {
	if slices.IsSortedFunc(s, cmp) {
		return s
	}
	s = slices.Clone(s)
	slices.SortFunc(s, cmp)
	return s
}
