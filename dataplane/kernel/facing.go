package kernel

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// facings finds, and remembers, the host interface that faces each local pod address: the
// interface of the directly connected route to it (a per-pod veth, or the bridge of a bridged
// CNI). A lookup is a route and a link request to the kernel; made for every pod at every sync
// (a CNI ADD waits for one) they were most of a sync's time with a few dozen pods. Which
// interface faces an address changes only with the links (a pod's veth comes or goes, a
// bridge is made again) and with the main table's routes, which the watchers report: the
// addresses behind a link that changed or went, or under a route that changed, are looked up
// again. While the events are not watched, nothing is remembered. The namespace's interfaces
// are kept likewise (links).
type facings struct {
	mu      sync.Mutex
	h       *netlink.Handle
	byAddr  map[netip.Addr]facing
	trusted bool // the events are watched
	// kept are the interfaces by index as last read, while the events are watched (links);
	// readAgain, those an event named since. era counts the times kept was dropped.
	kept      map[int]netlink.Link
	readAgain map[int]bool
	era       uint64
}

type facing struct {
	name  string
	index int
}

func newFacings() (*facings, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	return &facings{h: h, byAddr: map[netip.Addr]facing{}, readAgain: map[int]bool{}}, nil
}

// of returns the interface facing the pod address ip: the interface of its route, unless that
// is a gateway device of the node's own, a veth whose peer is in the node's namespace too; a
// pod routed via a gateway elsewhere is not on this node. Cilium routes its pods so (through cilium_host, whose program finds each
// pod's veth) unless it installs endpoint routes: the pod's veth is then the host side the CNI
// named in its ADD's result (hostSide).
func (f *facings) of(ip netip.Addr, hostSide []string) (string, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fc, ok := f.byAddr[ip]; ok {
		return fc.name, fc.index, nil
	}
	r, err := f.route(ip)
	if err != nil {
		return "", 0, err
	}
	l, err := f.h.LinkByIndex(r.LinkIndex)
	if err != nil {
		return "", 0, fmt.Errorf("interface %d facing pod %s: %w", r.LinkIndex, ip, err)
	}
	switch {
	case l.Type() == "device" && l.Attrs().Name == "lo":
		return "", 0, fmt.Errorf("pod address %s is local to the node", ip)
	case l.Type() == "veth" && l.Attrs().NetNsID < 0:
		gw := l.Attrs().Name
		if l = f.vethOf(hostSide); l == nil {
			return "", 0, fmt.Errorf("pod address %s is routed through %s, a device of the node's own, and its CNI named no host-side veth of the pod (%v): its packets cannot be judged before they leave", ip, gw, hostSide)
		}
	case r.Gw != nil:
		return "", 0, fmt.Errorf("pod address %s is routed via %s, not on a local interface", ip, r.Gw)
	}
	if f.trusted {
		f.byAddr[ip] = facing{l.Attrs().Name, l.Attrs().Index}
	}
	return l.Attrs().Name, l.Attrs().Index, nil
}

// route is the route the kernel takes to the pod address ip. The matching entry of the FIB
// says it, unless it is not a plain route through one interface (a local address, a
// multipath route, an unreachable one): the kernel then resolves the route, as ip route get
// does. That resolution also chooses a source address, which for IPv6 weighs every address of
// every interface: with a veth per pod, it made a new pod's CNI ADD slower the more pods the
// node had.
func (f *facings) route(ip netip.Addr) (netlink.Route, error) {
	routes, err := f.h.RouteGetWithOptions(ip.AsSlice(), &netlink.RouteGetOptions{FIBMatch: true})
	if err == nil && len(routes) == 1 && routes[0].Type == unix.RTN_UNICAST && routes[0].LinkIndex != 0 && len(routes[0].MultiPath) == 0 {
		return routes[0], nil
	}
	routes, err = f.h.RouteGet(ip.AsSlice())
	if err != nil || len(routes) == 0 {
		return netlink.Route{}, fmt.Errorf("no route to pod address %s: %v", ip, err)
	}
	return routes[0], nil
}

// vethOf is the one veth of names that is not a bridge's port and leads to another
// namespace, if there is one.
func (f *facings) vethOf(names []string) netlink.Link {
	var found netlink.Link
	for _, n := range names {
		l, err := f.h.LinkByName(n)
		if err != nil || l.Type() != "veth" || l.Attrs().MasterIndex != 0 || l.Attrs().NetNsID < 0 {
			continue
		}
		if found != nil {
			return nil
		}
		found = l
	}
	return found
}

// forgetRoute drops the addresses under dst, a route of the main table that changed (nil: the
// default route, which may now carry any of them); it reports whether it dropped one.
func (f *facings) forgetRoute(dst *net.IPNet) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	dropped := false
	for ip := range f.byAddr {
		if dst == nil || dst.Contains(ip.AsSlice()) {
			delete(f.byAddr, ip)
			dropped = true
		}
	}
	return dropped
}

// keepOnly forgets the addresses of pods that are gone.
func (f *facings) keepOnly(want map[netip.Addr]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ip := range f.byAddr {
		if !want[ip] {
			delete(f.byAddr, ip)
		}
	}
}

// watched tells whether the link and route events are watched from now on; what was
// remembered before is forgotten either way.
func (f *facings) watched(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trusted = on
	clear(f.byAddr)
	f.forgetLinks()
}

func (f *facings) close() { f.h.Close() }
