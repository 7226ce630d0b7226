package routing

import (
	"maps"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// Resolves says whether a change of route rt may move a gateway egressd's routes depend on: one
// whose interface Apply asks the kernel for (a nexthop without a device), at the last Apply or
// the one under way. Such a change (the gateway's network moved to another interface, a more
// specific route to it, its connected route gone or back) asks for a sync, which resolves it
// again; nothing in the API moves then. Routes of egressd's own tables are its own writes.
func (r *Router) Resolves(rt netlink.Route) bool {
	if rt.Dst == nil || r.cfg.ownsTable(uint32(rt.Table)) {
		return false
	}
	r.copiedMu.Lock()
	defer r.copiedMu.Unlock()
	for gw := range r.resolved {
		if rt.Dst.Contains(gw.AsSlice()) {
			return true
		}
	}
	return false
}

// Through says whether egressd's routes sent traffic through interface ifindex at the last
// Apply or the one under way: a gateway's (a gateway pod's veth among them), an egress node's
// or an egress IP's. The interface going away takes those routes with it, silently for IPv4.
func (r *Router) Through(ifindex int) bool {
	r.copiedMu.Lock()
	defer r.copiedMu.Unlock()
	return r.through[ifindex] || r.through6[ifindex] || r.passing[ifindex] || r.passing6[ifindex]
}

// pass marks ifindex in via, one of the maps Through reads while Apply fills it.
func (r *Router) pass(via map[int]bool, ifindex int) {
	r.copiedMu.Lock()
	defer r.copiedMu.Unlock()
	via[ifindex] = true
}

// resolving tells Resolves, while Apply runs, that it asks the kernel for gw's interface. Apply's
// goroutine only (mu held).
func (r *Router) resolving(gw netip.Addr) {
	r.applying[gw] = true
	r.copiedMu.Lock()
	defer r.copiedMu.Unlock()
	if r.resolved == nil {
		r.resolved = map[netip.Addr]bool{}
	}
	r.resolved[gw] = true
}

// resolvedAll ends an Apply: the gateways it resolved are those Resolves looks at from now on.
func (r *Router) resolvedAll() {
	r.copiedMu.Lock()
	defer r.copiedMu.Unlock()
	r.resolved = maps.Clone(r.applying)
}
