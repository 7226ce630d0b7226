package routing

import (
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// StrictRPFilter are the interfaces egressd's routes sent traffic through at the last Apply
// (a gateway's, an egress node's, an egress IP's on a secondary network) whose IPv4 reverse
// path filter is strict (the larger of all's and the interface's rp_filter is 1), other than
// the one of main's default route. The replies of that traffic arrive there while main's route
// back to their sender may go elsewhere, and the kernel drops them: OVN never meets this (OVS
// forwards around the host's stack), and upstream's `from <pod>` rules for egress IPs on
// secondary networks are consulted by the reverse path check, where egressd's marks are not.
func (r *Router) StrictRPFilter() []string {
	r.copiedMu.Lock()
	through := r.through
	r.copiedMu.Unlock()
	if len(through) == 0 {
		return nil
	}
	all := rpFilter("all")
	strict := map[int]string{}
	for index := range through {
		l, err := r.h.LinkByIndex(index)
		if err != nil || l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		if name := l.Attrs().Name; max(all, rpFilter(name)) == 1 {
			strict[index] = name
		}
	}
	if len(strict) == 0 { // the common case: no dump of main at every sync
		return nil
	}
	delete(strict, r.defaultInterface())
	out := slices.Collect(maps.Values(strict))
	slices.Sort(out)
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

// rpFilter is net.ipv4.conf.<name>.rp_filter (0 when unreadable).
func rpFilter(name string) int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + name + "/rp_filter")
	if err != nil {
		return 0
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return v
}
