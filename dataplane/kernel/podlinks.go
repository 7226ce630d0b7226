package kernel

import (
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// A pod's host-side interface brings link events when the pod starts (created, renamed, up:
// within a few milliseconds of its CNI ADD) and when it goes (down, deleted), and the events
// of routes through it. Only the classifier and attach, which run at every sync, read a pod's
// interface; a full pass for them ran nftables, addresses, tunnel and routing again too, for
// every pod that came or went, and at 16 pods at a time those syncs held the ADDs' syncs back.

// podSide says whether a link event is of a pod's host-side interface, which needs a sync but
// not a full pass, and remembers the answer for the interface's later events (podLinks): a
// veth appearing or changing, wherever its peer is (Cilium makes the pair on the node and moves
// the pod's end in), that neither the last state names (namedInterfaces) nor egressd's routes
// go through (a gateway pod's), holding no address but link-local and cluster ones
// (podSideAddr); or the deletion of an interface that was a pod's. Such a veth of the node's
// own (Cilium's cilium_host) is read by the classifier alone too.
func (k *kernelEvents) podSide(u netlink.LinkUpdate) bool {
	idx := int(u.Index)
	was := k.podLinks[idx]
	delete(k.podLinks, idx)
	named := k.named.Load()
	if named == nil || (*named)[u.Link.Attrs().Name] || k.router.Through(idx) {
		return false
	}
	if u.Header.Type == unix.RTM_DELLINK {
		delete(k.linkAddrs, idx)
		return was
	}
	if _, veth := u.Link.(*netlink.Veth); u.Header.Type != unix.RTM_NEWLINK || !veth || k.linkAddrs == nil {
		return false
	}
	for _, a := range k.linkAddrs[idx] {
		if !k.podSideAddr(a) {
			return false
		}
	}
	if k.podLinks == nil {
		k.podLinks = map[int]bool{}
	}
	k.podLinks[idx] = true
	return true
}

// noteAddress keeps linkAddrs as an address event tells.
func (k *kernelEvents) noteAddress(u netlink.AddrUpdate) {
	a, ok := netip.AddrFromSlice(u.LinkAddress.IP)
	if !ok || k.linkAddrs == nil {
		return
	}
	a, idx := a.Unmap(), u.LinkIndex
	held := slices.Index(k.linkAddrs[idx], a)
	switch {
	case u.NewAddr && held < 0:
		k.linkAddrs[idx] = append(k.linkAddrs[idx], a)
	case !u.NewAddr && held >= 0:
		k.linkAddrs[idx] = slices.Delete(k.linkAddrs[idx], held, held+1)
		if len(k.linkAddrs[idx]) == 0 {
			delete(k.linkAddrs, idx)
		}
	}
}

// podRoute says whether a route event of the main table is only a pod's: to pod-side
// addresses (podSidePrefix) through a pod's interface (podLinks), as the host route a routed
// CNI adds to a pod's address, or the IPv6 routes the kernel deletes with a pod's interface.
func (k *kernelEvents) podRoute(rt netlink.Route) bool {
	if rt.Table != unix.RT_TABLE_MAIN || rt.Dst == nil || !k.podLinks[rt.LinkIndex] {
		return false
	}
	addr, ok := netip.AddrFromSlice(rt.Dst.IP)
	bits, _ := rt.Dst.Mask.Size()
	return ok && k.podSidePrefix(netip.PrefixFrom(addr.Unmap(), bits))
}

// linkLocal are the link-local networks, on the pods' side of every node.
var linkLocal = []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fe80::/10")}

// podSidePrefix says whether every address of p is on the pods' side of the node: link-local,
// or in the cluster networks, pods' and services' (a routed CNI gives each pod's host
// interface a gateway address; kube-proxy's IPVS mode puts Service addresses on kube-ipvs0),
// none of which is ever an egress address nor published as the node's (hostCIDRs). A default
// route, or one wider than the cluster networks, is the node's.
func (k *kernelEvents) podSidePrefix(p netip.Prefix) bool {
	within := func(n netip.Prefix) bool { return n.Bits() <= p.Bits() && n.Contains(p.Addr()) }
	if slices.ContainsFunc(linkLocal, within) {
		return true
	}
	nets := k.podNetworks.Load()
	return nets != nil && slices.ContainsFunc(*nets, within)
}

// podSideAddr says whether an address is on the pods' side of the node (podSidePrefix).
func (k *kernelEvents) podSideAddr(a netip.Addr) bool {
	a = a.Unmap()
	return k.podSidePrefix(netip.PrefixFrom(a, a.BitLen()))
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
