package routing

import (
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ReplyInterfaces are the interfaces egressd's IPv4 routes sent traffic through at the last
// Apply (a gateway's, an egress node's, an egress IP's on a secondary network), other than the
// one of main's default route, by index: the replies of that traffic arrive there while main
// may route their sources elsewhere, which a strict reverse path filter drops (dataplane/rpfilter).
// OVN never meets this (OVS forwards around the host's stack), and upstream's `from <pod>`
// rules for egress IPs on secondary networks are consulted by the reverse path check, where
// egressd's marks are not. Only interfaces consider accepts are looked at (main is read only
// when one is left).
func (r *Router) ReplyInterfaces(consider func(name string) bool) map[int]string {
	r.copiedMu.Lock()
	through, copied := r.through, r.copied
	r.copiedMu.Unlock()
	if len(through) == 0 {
		return nil
	}
	out := map[int]string{}
	for index := range through {
		if l, err := r.h.LinkByIndex(index); err == nil && l.Attrs().Flags&net.FlagLoopback == 0 && consider(l.Attrs().Name) {
			out[index] = l.Attrs().Name
		}
	}
	if len(out) == 0 { // the common case: no dump of main at every sync
		return nil
	}
	// The default route's interface is where most sources are routed back through; an egress
	// IP's secondary network is a reply interface even when it holds a default route (of a
	// higher metric, or the only one).
	def := r.defaultInterface()
	if _, secondary := copied[def]; !secondary {
		delete(out, def)
	}
	return out
}

// defaultInterface is the interface of main's IPv4 default route of the lowest metric (0: none,
// or a multipath one).
func (r *Router) defaultInterface() int {
	routes, err := retried(func() ([]netlink.Route, error) {
		return r.h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return 0
	}
	best, metric := 0, -1
	for _, rt := range routes {
		if ones, _ := maskOf(rt); rt.Type == unix.RTN_UNICAST && ones == 0 && (metric < 0 || rt.Priority < metric) {
			best, metric = rt.LinkIndex, rt.Priority
		}
	}
	return best
}

// maskOf is the prefix length of a route's destination (0 for the default route).
func maskOf(rt netlink.Route) (int, int) {
	if rt.Dst == nil {
		return 0, 32
	}
	return rt.Dst.Mask.Size()
}
