// Package routing programs egressd's policy routing: ip rules that select a table by firewall
// mark, the tables' routes (a gateway, an ECMP group of gateways as kernel nexthop objects, or
// a blackhole), BFD-gated group members.
//
// What egressd owns is recognised in the kernel, not remembered: rules in its priority range,
// routes stamped with its protocol in its table range, nexthop objects stamped with its
// protocol (Config). A restarted agent therefore adopts the previous agent's objects and
// changes them in place; nothing is removed and re-added, so traffic sees no gap.
//
// Apply installs and changes, never removes; Prune removes. The composite applier calls Prune
// after the phases that stop using what is removed (removals run in reverse order).
package routing

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// Router programs the routing of the network namespace it was created in.
type Router struct {
	cfg Config
	h   *netlink.Handle
	nl  *rtnl

	mu sync.Mutex
	// groups remembers the group of each ECMP route, also while the route is a blackhole for
	// want of a live member (the group then still holds its last members), so that it is
	// reused when a member comes back. Rebuilt from the routes at New.
	groups map[routeKey]uint32
	// members are the nexthop objects of each ECMP route, live or not: Prune keeps those of
	// members whose BFD session is down, ready for when it comes back.
	members map[routeKey][]uint32
	// empty: the last read found nothing of egressd's (nor was anything added since), so a
	// state that wants nothing needs no read (the dumps of a node that steers nothing, which pods
	// coming and going interrupt and make retry).
	empty bool
	// reads counts the listings of the kernel's state (tests assert when there is none).
	reads int
	// inUse are the gateways egressd's routes sent traffic to when New found them.
	inUse []netip.Addr
	// copied are the interfaces whose routes the last WithLinkRoutes copied, by index, with the
	// table they were copied from (linkcopy.go), and copied6 those copied for an IPv6 address;
	// through and through6 are those egressd's IPv4 and IPv6 routes sent traffic through at the
	// last Apply (rpfilter.go); resolved are the gateways whose interface the
	// last Apply asked the kernel for, and those the Apply under way asked for so far
	// (gateways.go).
	copied   map[int]int
	copied6  map[int]bool
	through  map[int]bool
	through6 map[int]bool
	// passing and passing6 are those the Apply under way sent traffic through so far.
	passing  map[int]bool
	passing6 map[int]bool
	resolved map[netip.Addr]bool
	copiedMu sync.Mutex
	// applying are the gateways the Apply under way resolved so far (mu).
	applying map[netip.Addr]bool
}

// New opens the network namespace of the calling thread and adopts what egressd owns there.
func New(cfg Config) (*Router, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	c, err := openRtnl()
	if err != nil {
		h.Close()
		return nil, err
	}
	r := &Router{cfg: cfg, h: h, nl: c, groups: map[routeKey]uint32{}, members: map[routeKey][]uint32{}}
	k, err := r.read()
	if err != nil {
		r.Close()
		return nil, err
	}
	for key, rt := range k.routes {
		if nh, ok := k.owned(rt.nhid); ok && nh.group != nil {
			r.groups[key] = rt.nhid
		}
		r.inUse = append(r.inUse, k.gateways(rt)...)
	}
	return r, nil
}

// InUse are the gateways egressd's routes sent traffic to when the Router was created: what
// the previous agent judged alive (a BFD-gated gateway that was down had left its group).
func (r *Router) InUse() []netip.Addr { return r.inUse }

// gateways are where a route sends traffic: its gateway, its nexthop's, or its group members'.
func (k *kernel) gateways(rt kroute) []netip.Addr {
	nh, ok := k.owned(rt.nhid)
	switch {
	case !ok && rt.gw.IsValid():
		return []netip.Addr{rt.gw}
	case !ok:
		return nil
	case nh.group == nil:
		return []netip.Addr{nh.gw}
	}
	var out []netip.Addr
	for _, id := range nh.group {
		if m, ok := k.owned(id); ok && m.gw.IsValid() {
			out = append(out, m.gw)
		}
	}
	return out
}

// Close releases the netlink sockets; the kernel objects stay.
func (r *Router) Close() {
	r.h.Close()
	r.nl.close()
}

// Cleanup removes everything egressd owns in the calling thread's network namespace
// (`egressctl cleanup`).
func Cleanup(cfg Config) error {
	r, err := New(cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Prune(&dataplane.RoutingState{})
}

// kernel is what egressd owns in the namespace, read at the start of Apply and Prune.
type kernel struct {
	proto uint8
	rules []ownedRule
	// routes are egressd's routes by key; extra holds further routes of egressd with a key
	// already seen (only Prune removes them).
	routes map[routeKey]kroute
	extra  []kroute
	// nexthops holds every nexthop object of the namespace: all IDs are taken.
	nexthops map[uint32]nexthop
}

func (r *Router) read() (*kernel, error) {
	r.reads++
	k := &kernel{proto: uint8(r.cfg.Protocol), routes: map[routeKey]kroute{}}
	var err error
	if k.rules, err = r.readRules(); err != nil {
		return nil, err
	}
	routes, err := r.nl.readRoutes(k.proto, r.cfg.ownsTable)
	if err != nil {
		return nil, err
	}
	for _, rt := range routes {
		if _, dup := k.routes[rt.key]; dup {
			k.extra = append(k.extra, rt)
		} else {
			k.routes[rt.key] = rt
		}
	}
	if k.nexthops, err = r.nl.readNexthops(); err != nil {
		return nil, err
	}
	r.empty = len(k.rules) == 0 && len(k.routes) == 0 && len(k.extra) == 0 &&
		!slices.ContainsFunc(slices.Collect(maps.Keys(k.nexthops)), func(id uint32) bool { _, ok := k.owned(id); return ok })
	return k, nil
}

// owned returns egressd's nexthop object id.
func (k *kernel) owned(id uint32) (nexthop, bool) {
	nh, ok := k.nexthops[id]
	return nh, ok && id != 0 && nh.proto == k.proto
}

// freeID returns the first nexthop ID from base that no object of any owner uses.
func (k *kernel) freeID(base uint32) uint32 {
	id := base
	for _, taken := k.nexthops[id]; taken || id == 0; _, taken = k.nexthops[id] {
		id++
	}
	return id
}
