package routing

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// Tables that copy an interface's routes (RouteTable.LinkOf). An egress IP on a secondary host
// network must leave through its own interface: the main table would send its traffic out of
// the default route's interface with a source of another network. Upstream copies the
// interface's routes into a table of its own (ifindex + 1000) selected by `from <pod>`; here the
// copy is selected by the steering mark, since every pod packet meets the host's routing.

// WithLinkRoutes returns s with the routes of the tables that copy an interface's routes filled
// in from the main table as it is now, and remembers the interfaces copied (Copies), so that a
// change of their routes can ask for a sync. A table whose address no interface holds gets a
// blackhole default route of the address's family.
func (r *Router) WithLinkRoutes(s *dataplane.RoutingState) *dataplane.RoutingState {
	copied := map[int]bool{}
	defer func() {
		r.copiedMu.Lock()
		r.copied = copied
		r.copiedMu.Unlock()
	}()
	if !slices.ContainsFunc(s.Tables, func(t dataplane.RouteTable) bool { return len(t.LinkOf) > 0 }) {
		return s
	}
	out := *s
	out.Tables = slices.Clone(s.Tables)
	for i, t := range out.Tables {
		for _, a := range t.LinkOf {
			routes, link := r.linkRoutes(a.Unmap())
			if link > 0 {
				copied[link] = true
			}
			out.Tables[i].Routes = append(slices.Clip(out.Tables[i].Routes), routes...)
		}
	}
	return &out
}

// Copies says whether the last WithLinkRoutes copied the routes of interface ifindex.
func (r *Router) Copies(ifindex int) bool {
	r.copiedMu.Lock()
	defer r.copiedMu.Unlock()
	return r.copied[ifindex]
}

// linkRoutes are the routes of a's family in the main table through the interface holding a,
// with a default route through it when there is none, and that interface; a blackhole default
// route when no interface holds a (or its routes cannot be read).
func (r *Router) linkRoutes(a netip.Addr) ([]dataplane.Route, int) {
	def := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	family := netlink.FAMILY_V4
	if a.Is6() {
		def, family = netip.PrefixFrom(netip.IPv6Unspecified(), 0), netlink.FAMILY_V6
	}
	blackhole := []dataplane.Route{{Dst: def, Blackhole: true}}
	link, err := r.holder(a, family)
	if err != nil {
		return blackhole, 0
	}
	name, index := link.Attrs().Name, link.Attrs().Index
	kernel, err := r.h.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: index},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
	if err != nil {
		return blackhole, index
	}
	// One route per destination: the lowest metric (the main table may hold several).
	slices.SortFunc(kernel, func(x, y netlink.Route) int { return cmp.Compare(x.Priority, y.Priority) })
	seen := map[netip.Prefix]bool{}
	var out []dataplane.Route
	for _, k := range kernel {
		if k.Type != unix.RTN_UNICAST || len(k.MultiPath) > 0 {
			continue
		}
		dst := def
		if k.Dst != nil {
			ip, ok := netip.AddrFromSlice(k.Dst.IP)
			ones, _ := k.Dst.Mask.Size()
			if !ok {
				continue
			}
			dst = netip.PrefixFrom(ip.Unmap(), ones)
		}
		if seen[dst] {
			continue
		}
		seen[dst] = true
		nh := dataplane.Nexthop{Device: name, Onlink: k.Flags&unix.RTNH_F_ONLINK != 0}
		if gw, ok := netip.AddrFromSlice(k.Gw); ok {
			nh.Gateway = gw.Unmap()
		}
		nh.Onlink = nh.Onlink && nh.Gateway.IsValid()
		out = append(out, dataplane.Route{Dst: dst, Via: &nh})
	}
	if !seen[def] {
		out = append(out, dataplane.Route{Dst: def, Via: &dataplane.Nexthop{Device: name}})
	}
	slices.SortFunc(out, func(x, y dataplane.Route) int {
		return cmp.Or(x.Dst.Addr().Compare(y.Dst.Addr()), cmp.Compare(x.Dst.Bits(), y.Dst.Bits()))
	})
	return out, index
}

// holder is the interface holding address a.
func (r *Router) holder(a netip.Addr, family int) (netlink.Link, error) {
	addrs, err := r.h.AddrList(nil, family)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	for _, ka := range addrs {
		if ip, ok := netip.AddrFromSlice(ka.IP); ok && ip.Unmap() == a {
			return r.h.LinkByIndex(ka.LinkIndex)
		}
	}
	return nil, fmt.Errorf("no interface holds %s", a)
}
