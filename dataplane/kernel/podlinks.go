package kernel

import (
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// A new pod brings its host-side interface's link events (created, renamed, up) within a few
// milliseconds of its CNI ADD. Only the classifier and attach, which run at every sync, read a
// pod's interface; a full pass for them ran nftables, addresses, tunnel and routing again too,
// each pod, and at 16 pods at a time those syncs held the ADDs' syncs back.

// podSide says whether a link event is of a pod's host-side interface, which needs a sync but
// not a full pass, and remembers the answer for the interface's later events (podLinks). It is
// a pod's if it is a veth appearing or changing that the last state names nowhere (an egress
// address's, a route's or a BFD session's interface) and that holds no address but link-local
// ones and those in the cluster networks (podSideAddr), or the deletion of an interface that was
// a pod's. Where its peer is does not matter: most CNIs make the pair in the pod's namespace
// and move the host's end out, Cilium makes it on the node and moves the pod's end in (the
// node sees that end deleted), and a pod torn down leaves the host's end without a peer for a
// moment. The node's interfaces (a lab node's uplink is a veth too, with the node's address),
// egressd's tunnel and VRFs make the next sync run every facility; so does an address outside
// the pods' side put on a pod's interface (kernelEvents.consume).
func (k *kernelEvents) podSide(u netlink.LinkUpdate) bool {
	idx := int(u.Index)
	was := k.podLinks[idx]
	delete(k.podLinks, idx)
	named := k.named.Load()
	if named == nil || (*named)[u.Link.Attrs().Name] {
		return false
	}
	if u.Header.Type == unix.RTM_DELLINK {
		return was
	}
	veth, ok := u.Link.(*netlink.Veth)
	if u.Header.Type != unix.RTM_NEWLINK || !ok || k.addrsOf == nil {
		return false
	}
	addrs, err := k.addrsOf(veth)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || !k.podSideAddr(ip) {
			return false
		}
	}
	if k.podLinks == nil {
		k.podLinks = map[int]bool{}
	}
	k.podLinks[idx] = true
	return true
}

// podRoute says whether a route event of the main table is only a pod's: its interface is a
// pod's (podLinks), as the host route a routed CNI adds to a pod's address, or the IPv6 routes
// the kernel deletes with a pod's interface.
func (k *kernelEvents) podRoute(rt netlink.Route) bool {
	return rt.Table == unix.RT_TABLE_MAIN && rt.LinkIndex > 0 && k.podLinks[rt.LinkIndex]
}

// podSideAddr says whether an address is on the pods' side of the node: link-local, or in the
// cluster networks, pods' and services' (a routed CNI gives each pod's host interface a gateway
// address; kube-proxy's IPVS mode puts Service addresses on kube-ipvs0), none of which is ever
// an egress address nor published as the node's (hostCIDRs).
func (k *kernelEvents) podSideAddr(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLinkLocalUnicast() {
		return true
	}
	nets := k.podNetworks.Load()
	return nets != nil && slices.ContainsFunc(*nets, func(p netip.Prefix) bool { return p.Contains(a) })
}

// namedInterfaces are the interfaces s names: those of egress addresses, routes' nexthops and
// BFD sessions.
func namedInterfaces(s *dataplane.State) map[string]bool {
	named := map[string]bool{}
	for _, a := range s.Addresses {
		named[a.Interface] = true
	}
	for _, p := range s.BFD {
		named[p.Interface] = true
	}
	for _, t := range s.Routing.Tables {
		for _, r := range t.Routes {
			if r.Via != nil {
				named[r.Via.Device] = true
			}
			for _, nh := range r.Nexthops {
				named[nh.Device] = true
			}
		}
	}
	delete(named, "")
	return named
}
