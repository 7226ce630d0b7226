package routing

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// Apply makes the kernel hold everything s wants, comparing with what is there so that a
// repeated Apply writes nothing. It never removes (see Prune). up says whether the BFD session
// to a peer is Up (nil: all are): a BFD-gated nexthop whose peer is not Up is left out, and a
// route left without a usable nexthop becomes a blackhole, so that marked traffic is dropped
// rather than leaked through the main table. Errors are returned by the Origin they concern.
func (r *Router) Apply(s *dataplane.RoutingState, up func(peer netip.Addr) bool) map[dataplane.Origin]error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if up == nil {
		up = func(netip.Addr) bool { return true }
	}
	rules, routes, errs := r.cfg.wanted(s)
	through, through6 := map[int]bool{}, map[int]bool{}
	r.copiedMu.Lock()
	r.passing, r.passing6 = through, through6 // Through reads them while this Apply fills them
	r.copiedMu.Unlock()
	r.applying = map[netip.Addr]bool{}
	defer r.resolvedAll()
	defer func() {
		r.copiedMu.Lock()
		defer r.copiedMu.Unlock()
		r.passing, r.passing6 = nil, nil
		if through != nil { // nil: the kernel could not be read, and nothing changed
			r.through, r.through6 = through, through6
		}
	}()
	if len(rules) == 0 && len(routes) == 0 && r.empty {
		return errs
	}
	fail := func(o dataplane.Origin, err error) { errs[o] = errors.Join(errs[o], err) }
	k, err := r.read()
	if err != nil {
		through = nil
		for _, rule := range s.Rules {
			fail(rule.Origin, err)
		}
		for _, t := range s.Tables {
			fail(t.Origin, err)
		}
		return errs
	}
	r.empty = r.empty && len(rules) == 0 && len(routes) == 0
	// Tables before the rules that select them: a rule that selects a table still empty would
	// send marked traffic on to the main table.
	for _, w := range routes {
		if err := r.applyRoute(k, w, up); err != nil {
			fail(w.origin, err)
		}
		via := through // the rp_filter sysctl's (IPv4), or the firewall's check's (IPv6)
		if !w.key.dst.Addr().Is4() {
			via = through6
		}
		if rt := k.routes[w.key]; rt.oif > 0 && rt.typ == unix.RTN_UNICAST {
			r.pass(via, rt.oif)
		}
		for _, id := range r.members[w.key] {
			if nh, ok := k.owned(id); ok && nh.oif > 0 {
				r.pass(via, nh.oif)
			}
		}
	}
	have := map[ruleKey]bool{}
	for _, o := range k.rules {
		have[o.key] = have[o.key] || o.ok
	}
	for _, w := range rules {
		if have[w.key] {
			continue
		}
		if err := r.addRule(w.key); err != nil {
			fail(w.origin, err)
			continue
		}
		have[w.key] = true
	}
	return errs
}

// applyRoute installs one route. What cannot be programmed is reported, and leaves the route
// a blackhole (a single gateway) or the member out of the group (ECMP).
func (r *Router) applyRoute(k *kernel, w wantedRoute, up func(netip.Addr) bool) error {
	shape := shapeRoute(w.route, up)
	want := kroute{key: w.key, proto: k.proto, typ: shape.typ, src: w.route.Src}
	var errs []error
	switch {
	case shape.via != nil:
		nh := *shape.via
		oif, err := r.device(nh)
		if err != nil {
			errs = append(errs, err)
			want.typ = unix.RTN_BLACKHOLE
			break
		}
		want.gw, want.oif, want.onlink = nh.Gateway, oif, nh.Onlink
	case len(shape.members) > 0:
		var all, live []uint32
		for i, nh := range shape.members {
			id, err := r.member(k, w.key.family(), nh)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			all = append(all, id)
			if shape.live[i] {
				live = append(live, id)
			}
		}
		r.members[w.key] = all
		if len(live) == 0 {
			want.typ = unix.RTN_BLACKHOLE
			break
		}
		gid, err := r.group(k, w.key, live, shape.resilient)
		if err != nil {
			errs = append(errs, err)
			want.typ = unix.RTN_BLACKHOLE
			break
		}
		want.nhid = gid
	}
	have, ok := k.routes[w.key]
	if !ok || !want.same(have) {
		if err := r.nl.writeRoute(want, ok); err != nil {
			errs = append(errs, err)
			// A default route that cannot be written because its interface is down (it went
			// down under it) must not leave its table without one: what the table selects
			// would go on to main.
			down := errors.Is(err, unix.ENETDOWN) || errors.Is(err, unix.ENODEV)
			if bh := (kroute{key: w.key, proto: k.proto, typ: unix.RTN_BLACKHOLE}); down && w.key.dst.Bits() == 0 && want.typ != unix.RTN_BLACKHOLE &&
				(!ok || !bh.same(have)) && r.nl.writeRoute(bh, ok) == nil {
				k.routes[w.key] = bh
			}
			return errors.Join(errs...)
		}
		k.routes[w.key] = want
	}
	return errors.Join(errs...)
}

// routeShape is what a wanted route becomes once the BFD sessions are known, before its
// devices and nexthop objects are resolved (which may still turn it into a blackhole).
type routeShape struct {
	typ uint8 // RTN_UNICAST, RTN_BLACKHOLE or RTN_THROW
	// via is the gateway of a single-gateway route that is not a blackhole.
	via *dataplane.Nexthop
	// members are an ECMP route's nexthops, each with a nexthop object whether live or not;
	// live says which are in the group: not BFD-gated, or their session is Up.
	members []dataplane.Nexthop
	live    []bool
	// resilient: every member is BFD-gated, so the group is resilient (nexthops.go).
	resilient bool
}

// shapeRoute decides a route's shape given up: a BFD-gated gateway whose session is not Up
// makes a blackhole, as does an ECMP route without a live member.
func shapeRoute(rt dataplane.Route, up func(netip.Addr) bool) routeShape {
	switch {
	case rt.Blackhole:
		return routeShape{typ: unix.RTN_BLACKHOLE}
	case rt.Throw:
		return routeShape{typ: unix.RTN_THROW}
	case rt.Via != nil:
		if rt.Via.BFD && !up(rt.Via.Gateway) {
			return routeShape{typ: unix.RTN_BLACKHOLE}
		}
		nh := *rt.Via
		return routeShape{typ: unix.RTN_UNICAST, via: &nh}
	}
	s := routeShape{typ: unix.RTN_BLACKHOLE, members: rt.Nexthops, resilient: true}
	for _, nh := range rt.Nexthops {
		s.resilient = s.resilient && nh.BFD && nh.Gateway.IsValid()
		live := !nh.BFD || !nh.Gateway.IsValid() || up(nh.Gateway)
		s.live = append(s.live, live)
		if live {
			s.typ = unix.RTN_UNICAST
		}
	}
	return s
}

// device resolves the interface of a nexthop: the named one, or the one the kernel reaches
// the gateway through (which must be directly connected).
func (r *Router) device(nh dataplane.Nexthop) (int, error) {
	if nh.Device != "" {
		l, err := r.h.LinkByName(nh.Device)
		if err != nil {
			return 0, fmt.Errorf("nexthop %s: device %q: %w", nh.Gateway, nh.Device, err)
		}
		return l.Attrs().Index, nil
	}
	r.resolving(nh.Gateway)
	routes, err := r.h.RouteGet(nh.Gateway.AsSlice())
	if err != nil || len(routes) == 0 {
		return 0, fmt.Errorf("gateway %s: no route: %v", nh.Gateway, err)
	}
	if routes[0].Gw != nil {
		return 0, fmt.Errorf("gateway %s is not on a connected network (reached via %s)", nh.Gateway, routes[0].Gw)
	}
	return routes[0].LinkIndex, nil
}

// member returns egressd's nexthop object for nh, creating it if there is none.
func (r *Router) member(k *kernel, family uint8, nh dataplane.Nexthop) (uint32, error) {
	oif, err := r.device(nh)
	if err != nil {
		return 0, err
	}
	var found uint32
	for id, o := range k.nexthops {
		if o.proto == k.proto && o.group == nil && !o.other && o.family == family && o.gw == nh.Gateway && o.oif == oif && o.onlink == nh.Onlink && (found == 0 || id < found) {
			found = id
		}
	}
	if found != 0 {
		return found, nil
	}
	id := k.freeID(r.cfg.NexthopIDBase)
	if err := r.nl.createMember(id, k.proto, family, nh.Gateway, oif, nh.Onlink); err != nil {
		return 0, err
	}
	k.nexthops[id] = nexthop{id: id, proto: k.proto, family: family, gw: nh.Gateway, oif: oif, onlink: nh.Onlink}
	return id, nil
}

// group returns the route's nexthop group, resilient or not, holding exactly live, replacing the
// members of the route's current group of that type in place, or creating one (the route then
// moves to it, and Prune removes the other).
func (r *Router) group(k *kernel, key routeKey, live []uint32, resilient bool) (uint32, error) {
	slices.Sort(live)
	live = slices.Compact(live)
	var gid uint32
	for _, id := range []uint32{k.routes[key].nhid, r.groups[key]} {
		if nh, ok := k.owned(id); ok && nh.group != nil && !nh.other && nh.resilient == resilient {
			gid = id
			break
		}
	}
	switch {
	case gid != 0 && slices.Equal(k.nexthops[gid].group, live):
	case gid != 0:
		if err := r.nl.writeGroup(gid, k.proto, live, true, resilient); err != nil {
			return 0, err
		}
	default:
		gid = k.freeID(r.cfg.NexthopIDBase)
		if err := r.nl.writeGroup(gid, k.proto, live, false, resilient); err != nil {
			return 0, err
		}
	}
	k.nexthops[gid] = nexthop{id: gid, proto: k.proto, group: live, resilient: resilient}
	r.groups[key] = gid
	return gid, nil
}
