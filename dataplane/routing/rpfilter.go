package routing

import (
	"errors"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ReplyInterfaces are the interfaces egressd's IPv4 routes sent traffic through at the last
// Apply (a gateway's, an egress node's, an egress IP's on a secondary network), other than
// those of main's default route, by index: the replies of that traffic arrive there while main
// may route their sources elsewhere, which a strict reverse path filter drops (dataplane/rpfilter).
// OVN never meets this (OVS forwards around the host's stack), and upstream's `from <pod>`
// rules for egress IPs on secondary networks are consulted by the reverse path check, where
// egressd's marks are not. Only interfaces consider accepts are looked at (main is read only
// when one is left). complete is false when the kernel could not say (an interface or main
// unreadable): what is returned is then only part of them.
func (r *Router) ReplyInterfaces(consider func(name string) bool) (out map[int]string, complete bool) {
	r.copiedMu.Lock()
	through := r.through
	r.copiedMu.Unlock()
	complete = true
	out = map[int]string{}
	for index := range through {
		l, err := r.h.LinkByIndex(index)
		var notFound netlink.LinkNotFoundError
		switch {
		case errors.As(err, &notFound): // gone, and its routes with it
		case err != nil:
			complete = false
		case l.Attrs().Flags&net.FlagLoopback == 0 && consider(l.Attrs().Name):
			out[index] = l.Attrs().Name
		}
	}
	if len(out) == 0 { // the common case: no dump of main at every sync
		return out, complete
	}
	defaults, err := r.defaultInterfaces(netlink.FAMILY_V4)
	if err != nil {
		return map[int]string{}, false
	}
	for index := range defaults {
		delete(out, index)
	}
	return out, complete
}

// maxArrivalLookups bounds the route lookups of SteeredArrivals per list: the nodes of one
// cluster, and their pod networks, are routed alike, so a sample decides.
const maxArrivalLookups = 64

// SteeredArrivals are the interfaces through which main reaches the other nodes (from, their
// primary IPv4 addresses) when it routes their pods (pods, their pod networks) through another
// interface, by index: an egress node receives the packets other nodes steer to it directly on
// the network it shares with them, with the sources of pods that main reaches through the
// CNI's overlay (flannel.1, tunl0), and a strict reverse path filter there drops them. Only
// interfaces consider accepts are returned; at most maxArrivalLookups of each list, spread
// over it, are looked up. complete is false when the kernel could not say.
func (r *Router) SteeredArrivals(from []netip.Addr, pods []netip.Prefix, consider func(name string) bool) (out map[int]string, complete bool) {
	out = map[int]string{}
	if len(from) == 0 || len(pods) == 0 {
		return out, true
	}
	// The interfaces other nodes are reached through (via), and those of them consider
	// accepts (strict ones): with none, no pod network need be looked up (the common case,
	// at every sync).
	via, arrival := map[int]bool{}, map[int]string{}
	for i := 0; i < len(from); i += max(1, len(from)/maxArrivalLookups) {
		routes, err := r.h.RouteGet(from[i].AsSlice())
		if err != nil {
			return out, false
		}
		for _, rt := range routes {
			via[rt.LinkIndex] = true
		}
	}
	complete = true
	for index := range via {
		l, err := r.h.LinkByIndex(index)
		switch {
		case err != nil:
			complete = false
		case consider(l.Attrs().Name):
			arrival[index] = l.Attrs().Name
		}
	}
	if len(arrival) == 0 {
		return out, complete
	}
	var v4 []netip.Prefix
	for _, p := range pods {
		if p.Addr().Is4() {
			v4 = append(v4, p)
		}
	}
	for i := 0; i < len(v4); i += max(1, len(v4)/maxArrivalLookups) {
		// A pod's address, not the network's: main may route the network address apart.
		routes, err := r.h.RouteGet(v4[i].Masked().Addr().Next().AsSlice())
		if err != nil {
			return out, false
		}
		for _, rt := range routes {
			if !via[rt.LinkIndex] {
				return arrival, complete
			}
		}
	}
	return out, complete
}

// ReplyInterfaces6 are the interfaces egressd's IPv6 routes sent traffic through at the last
// Apply, other than those of main's IPv6 default route, by index, as ReplyInterfaces for IPv4.
// IPv6 has no rp_filter sysctl: the reverse path check that drops their replies is a firewall's
// (firewalld's IPv6_rpfilter; dataplane/rpfilter's Checks6). marked are those of them whose
// routes WithLinkRoutes copied for an IPv6 egress IP (a secondary network's): the replies
// arriving there carry that table's mark through the checks (dataplane/nft's reverse path
// rules), so a check keyed by the mark passes them; the others' (a gateway's) do not.
func (r *Router) ReplyInterfaces6() (out map[int]string, marked map[int]bool, complete bool) {
	r.copiedMu.Lock()
	through, copied6 := r.through6, r.copied6
	r.copiedMu.Unlock()
	complete = true
	out, marked = map[int]string{}, map[int]bool{}
	for index := range through {
		l, err := r.h.LinkByIndex(index)
		var notFound netlink.LinkNotFoundError
		switch {
		case errors.As(err, &notFound):
		case err != nil:
			complete = false
		case l.Attrs().Flags&net.FlagLoopback == 0:
			out[index] = l.Attrs().Name
		}
	}
	if len(out) == 0 {
		return out, marked, complete
	}
	defaults, err := r.defaultInterfaces(netlink.FAMILY_V6)
	if err != nil {
		return map[int]string{}, marked, false
	}
	for index := range out {
		switch {
		case defaults[index]:
			delete(out, index)
		case copied6[index]:
			marked[index] = true
		}
	}
	return out, marked, complete
}

// defaultInterfaces are the interfaces of main's default route of family of the lowest metric
// (all of its members when it is a multipath one).
func (r *Router) defaultInterfaces(family int) (map[int]bool, error) {
	routes, err := retried(func() ([]netlink.Route, error) {
		return r.h.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, err
	}
	return defaultsOf(routes), nil
}

// defaultsOf are the interfaces of the unicast default route of routes of the lowest metric
// (all of its members when it is a multipath one).
func defaultsOf(routes []netlink.Route) map[int]bool {
	out := map[int]bool{}
	metric := -1
	for _, rt := range routes {
		if ones, _ := maskOf(rt); rt.Type != unix.RTN_UNICAST || ones != 0 || (metric >= 0 && rt.Priority >= metric) {
			continue
		}
		metric = rt.Priority
		clear(out)
		out[rt.LinkIndex] = true
		for _, nh := range rt.MultiPath {
			out[nh.LinkIndex] = true
		}
	}
	return out
}

// maskOf is the prefix length of a route's destination (0 for the default route).
func maskOf(rt netlink.Route) (int, int) {
	if rt.Dst == nil {
		return 0, 32
	}
	return rt.Dst.Mask.Size()
}
