package routing

import (
	"cmp"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"
)

// Programmed is egressd's policy routing as the kernel holds it, for egressctl: whoever
// programmed it, read back from the current network namespace.
type Programmed struct {
	// Rules are the rules in egressd's priority range, by priority.
	Rules []ProgrammedRule
	// Routes are the routes stamped with egressd's protocol in its tables, by table and
	// destination.
	Routes []ProgrammedRoute
	// Standby are the gateways of egressd's nexthop objects that no route uses: members left
	// out of their group because their BFD session is not Up (Prune removes the others).
	Standby []netip.Addr
}

// ProgrammedRule is `ip rule priority Priority [from Src] fwmark Mark/Mask lookup Table`.
type ProgrammedRule struct {
	Priority   int
	IPv6       bool
	Mark, Mask uint32
	Src        netip.Prefix
	Table      uint32
}

// ProgrammedRoute is a route of one of egressd's tables.
type ProgrammedRoute struct {
	Table uint32
	Dst   netip.Prefix
	// Blackhole drops what the route matches: no live gateway (or none of the family).
	Blackhole bool
	// Throw sends the lookup on to main (a cluster network in a steering table).
	Throw bool `json:",omitempty"`
	// Gateways are where flows go: the route's gateway, or the members of its nexthop group
	// (live ones only: the kernel spreads flows over all of them).
	Gateways []netip.Addr
	// Group is the ID of its nexthop group, 0 for none.
	Group uint32
	// Device is the interface of a route without gateway (on link: a copy of an egress IP's
	// interface's routes).
	Device string `json:",omitempty"`
	// Src is the preferred source address, when set.
	Src netip.Addr
}

// Inspect reads egressd's rules, routes and nexthop objects in the calling thread's network
// namespace.
func Inspect(cfg Config) (Programmed, error) {
	r, err := New(cfg)
	if err != nil {
		return Programmed{}, err
	}
	defer r.Close()
	k, err := r.read()
	if err != nil {
		return Programmed{}, err
	}
	var p Programmed
	for _, o := range k.rules {
		p.Rules = append(p.Rules, ProgrammedRule{Priority: o.key.priority, IPv6: o.key.v6, Mark: o.key.mark, Mask: o.key.mask, Src: o.key.src, Table: o.key.table})
	}
	// By priority, each family in the kernel's order (the order it consults them in).
	slices.SortStableFunc(p.Rules, func(a, b ProgrammedRule) int { return cmp.Compare(a.Priority, b.Priority) })
	used := map[uint32]bool{}
	for key, rt := range k.routes {
		pr := ProgrammedRoute{Table: key.table, Dst: key.dst, Blackhole: rt.typ == unix.RTN_BLACKHOLE, Throw: rt.typ == unix.RTN_THROW, Src: rt.src}
		switch nh, ok := k.nexthops[rt.nhid]; {
		case rt.nhid == 0 && rt.gw.IsValid():
			pr.Gateways = []netip.Addr{rt.gw}
		case rt.nhid == 0 && rt.oif > 0:
			if l, err := r.h.LinkByIndex(rt.oif); err == nil {
				pr.Device = l.Attrs().Name
			}
		case ok && nh.group != nil:
			pr.Group = rt.nhid
			for _, id := range nh.group {
				used[id] = true
				if m := k.nexthops[id]; m.gw.IsValid() {
					pr.Gateways = append(pr.Gateways, m.gw)
				}
			}
		case ok:
			used[rt.nhid] = true
			pr.Gateways = []netip.Addr{nh.gw}
		}
		slices.SortFunc(pr.Gateways, netip.Addr.Compare)
		p.Routes = append(p.Routes, pr)
	}
	slices.SortFunc(p.Routes, func(a, b ProgrammedRoute) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), a.Dst.Addr().Compare(b.Dst.Addr()), cmp.Compare(a.Dst.Bits(), b.Dst.Bits()))
	})
	for id, nh := range k.nexthops {
		if _, ok := k.owned(id); ok && nh.group == nil && !used[id] && nh.gw.IsValid() {
			p.Standby = append(p.Standby, nh.gw)
		}
	}
	slices.SortFunc(p.Standby, netip.Addr.Compare)
	p.Standby = slices.Compact(p.Standby)
	return p, nil
}

// Select is what egressd's routing does with a packet from src to dst carrying mark: the first
// of its rules that matches, and the route of that rule's table for dst (longest prefix; nil
// when the table is not egressd's, as a VRF's, or has none; a throw route sends the lookup on to
// the next rule). ok is false when none of its rules matches: the packet goes on to the node's
// other rules.
func (p Programmed) Select(src, dst netip.Addr, mark uint32) (rule ProgrammedRule, route *ProgrammedRoute, ok bool) {
	for _, r := range p.Rules {
		if r.IPv6 != dst.Is6() || mark&r.Mask != r.Mark || (r.Src.IsValid() && !r.Src.Contains(src)) {
			continue
		}
		for i, rt := range p.Routes {
			if rt.Table == r.Table && rt.Dst.Contains(dst) && (route == nil || rt.Dst.Bits() > route.Dst.Bits()) {
				route = &p.Routes[i]
			}
		}
		if route != nil && route.Throw { // on to the next rules, as the kernel goes
			route = nil
			continue
		}
		return r, route, true
	}
	return ProgrammedRule{}, nil, false
}
