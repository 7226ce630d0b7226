package routing

import (
	"cmp"
	"errors"
	"fmt"
	"net"
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
// in from the main table (or the table of the interface's VRF) as it is now, and remembers the
// interfaces copied (Copies), so that a change of their routes can ask for a sync. A table whose
// address no interface holds, or whose interface is down, gets a blackhole default route of the
// address's family.
func (r *Router) WithLinkRoutes(s *dataplane.RoutingState) *dataplane.RoutingState {
	copied, copied6 := map[int]int{}, map[int]bool{}
	defer func() {
		r.copiedMu.Lock()
		r.copied, r.copied6 = copied, copied6
		r.copiedMu.Unlock()
	}()
	if !slices.ContainsFunc(s.Tables, func(t dataplane.RouteTable) bool { return len(t.LinkOf) > 0 }) {
		return s
	}
	out := *s
	out.Tables = slices.Clone(s.Tables)
	for i, t := range out.Tables {
		for _, a := range t.LinkOf {
			routes, link, table := r.linkRoutes(a.Unmap())
			if link > 0 {
				copied[link] = table
				copied6[link] = copied6[link] || a.Unmap().Is6()
			}
			out.Tables[i].Routes = append(slices.Clip(out.Tables[i].Routes), routes...)
		}
	}
	return &out
}

// Copies says whether the last WithLinkRoutes copied the routes of interface ifindex from
// table, or is copying them now.
func (r *Router) Copies(ifindex, table int) bool {
	r.copiedMu.Lock()
	defer r.copiedMu.Unlock()
	t, ok := r.copied[ifindex]
	return ok && t == table
}

// copying tells Copies, while WithLinkRoutes runs, that it reads the routes of ifindex in
// table: a change made while it reads them asks for a sync too.
func (r *Router) copying(ifindex, table int) {
	r.copiedMu.Lock()
	defer r.copiedMu.Unlock()
	if r.copied == nil {
		r.copied = map[int]int{}
	}
	r.copied[ifindex] = table
}

// linkRoutes are the routes of a's family through the interface holding a, in the main table
// or, for an interface enslaved to a VRF, in the VRF's table (as upstream), with a default route
// through it when there is none; and that interface and table. A multipath route keeps its
// members through the interface. A blackhole default route when no interface holds a, the
// interface is down (the kernel has removed its routes; main's would take the traffic) or its
// routes cannot be read.
func (r *Router) linkRoutes(a netip.Addr) ([]dataplane.Route, int, int) {
	def := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	family := netlink.FAMILY_V4
	if a.Is6() {
		def, family = netip.PrefixFrom(netip.IPv6Unspecified(), 0), netlink.FAMILY_V6
	}
	blackhole := []dataplane.Route{{Dst: def, Blackhole: true}}
	link, err := r.holder(a, family)
	if err != nil {
		return blackhole, 0, 0
	}
	attrs := link.Attrs()
	var master netlink.Link
	if attrs.MasterIndex > 0 {
		master, _ = r.h.LinkByIndex(attrs.MasterIndex)
	}
	table := sourceTable(master)
	r.copying(attrs.Index, table)
	if attrs.Flags&net.FlagUp == 0 {
		return blackhole, attrs.Index, table
	}
	kernel, err := retried(func() ([]netlink.Route, error) {
		return r.h.RouteListFiltered(family, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return blackhole, attrs.Index, table
	}
	// One route per destination: the lowest metric (the table may hold several).
	slices.SortFunc(kernel, func(x, y netlink.Route) int { return cmp.Compare(x.Priority, y.Priority) })
	seen := map[netip.Prefix]bool{}
	var out []dataplane.Route
	for _, k := range kernel {
		hops := throughLink(k, attrs)
		if k.Type != unix.RTN_UNICAST || len(hops) == 0 {
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
		rt := dataplane.Route{Dst: dst, Nexthops: hops}
		if len(hops) == 1 {
			rt = dataplane.Route{Dst: dst, Via: &hops[0]}
		}
		out = append(out, rt)
	}
	if !seen[def] {
		out = append(out, dataplane.Route{Dst: def, Via: &dataplane.Nexthop{Device: attrs.Name}})
	}
	slices.SortFunc(out, func(x, y dataplane.Route) int {
		return cmp.Or(x.Dst.Addr().Compare(y.Dst.Addr()), cmp.Compare(x.Dst.Bits(), y.Dst.Bits()))
	})
	return out, attrs.Index, table
}

// sourceTable is the table an interface's routes are in: its VRF's when its master is one,
// else main.
func sourceTable(master netlink.Link) int {
	if vrf, ok := master.(*netlink.Vrf); ok {
		return int(vrf.Table)
	}
	return unix.RT_TABLE_MAIN
}

// throughLink are the nexthops of route k that go through the link (of a multipath route,
// those with a gateway: a group's members need one).
func throughLink(k netlink.Route, link *netlink.LinkAttrs) []dataplane.Nexthop {
	hop := func(index int, gw net.IP, flags int) (dataplane.Nexthop, bool) {
		nh := dataplane.Nexthop{Device: link.Name}
		if a, ok := netip.AddrFromSlice(gw); ok {
			nh.Gateway = a.Unmap()
		}
		nh.Onlink = flags&unix.RTNH_F_ONLINK != 0 && nh.Gateway.IsValid()
		return nh, index == link.Index
	}
	if len(k.MultiPath) == 0 {
		if nh, ok := hop(k.LinkIndex, k.Gw, k.Flags); ok {
			return []dataplane.Nexthop{nh}
		}
		return nil
	}
	var out []dataplane.Nexthop
	for _, m := range k.MultiPath {
		if nh, ok := hop(m.LinkIndex, m.Gw, m.Flags); ok && nh.Gateway.IsValid() {
			out = append(out, nh)
		}
	}
	return out
}

// holder is the interface holding address a.
func (r *Router) holder(a netip.Addr, family int) (netlink.Link, error) {
	addrs, err := retried(func() ([]netlink.Addr, error) { return r.h.AddrList(nil, family) })
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

// retried runs a netlink dump again when the kernel says it changed while dumping (routes and
// addresses come and go with pods): a partial listing would blackhole an egress IP's table.
func retried[T any](dump func() ([]T, error)) ([]T, error) {
	for try := 0; ; try++ {
		out, err := dump()
		if errors.Is(err, netlink.ErrDumpInterrupted) && try < 5 {
			continue
		}
		return out, err
	}
}
