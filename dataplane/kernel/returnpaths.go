package kernel

import (
	"errors"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// returnPaths are the external gateways' return paths nftables gets: a BFD-gated one only while
// its session is Up, each with its gateway's MAC from the neighbour table (a connection is told
// to come from a gateway by its source MAC). A gateway not resolved yet is asked for (the kernel
// resolves it) and left out; the neighbour event of its answer, as that of a gateway whose MAC
// changes (a gratuitous ARP or unsolicited NA of a moved gateway), triggers a sync.
func (f *nftFacility) returnPaths(paths []dataplane.ReturnPath, up func(netip.Addr) bool) []dataplane.ReturnPath {
	// The neighbour table is read only for gateways: a node has many neighbours. unread: by
	// family (IPv4: true), the table could not be read.
	var macs map[netip.Addr]net.HardwareAddr
	unread := map[bool]bool{}
	if len(paths) > 0 {
		macs, unread = neighbours()
	}
	f.mu.Lock()
	programmed := f.gatewayMACs
	f.mu.Unlock()
	watched := map[netip.Addr]string{}
	var out []dataplane.ReturnPath
	var unresolved []netip.Addr
	for _, p := range paths {
		gw := p.Gateway.Unmap()
		mac := macs[gw]
		if unread[gw.Is4()] && programmed[gw] != "" {
			// A listing that failed is no news: a gateway keeps its MAC (losing its return
			// path would delete the conntrack entries of its connections).
			mac, _ = net.ParseMAC(programmed[gw])
		}
		watched[gw] = mac.String()
		switch {
		case p.BFD && !up(p.Gateway):
		case mac == nil:
			unresolved = append(unresolved, gw)
		default:
			p.MAC = mac
			out = append(out, p)
		}
	}
	f.mu.Lock()
	f.gatewayMACs = watched
	f.mu.Unlock()
	for _, gw := range unresolved { // once watched: the answer may come at once
		resolve(gw)
	}
	return out
}

// neighbourChanged tells whether a neighbour update concerns a gateway of a return path whose
// MAC is not the one last programmed.
func (f *nftFacility) neighbourChanged(u netlink.NeighUpdate) bool {
	ip, ok := netip.AddrFromSlice(u.IP)
	if !ok {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	programmed, watched := f.gatewayMACs[ip.Unmap()]
	if !watched {
		return false
	}
	var mac net.HardwareAddr
	if u.Type == unix.RTM_NEWNEIGH && usable(u.State) {
		mac = u.HardwareAddr
	}
	return mac.String() != programmed
}

// neighbours are the node's resolved neighbours' MACs by address, and the families (IPv4:
// true) whose table could not be read.
func neighbours() (map[netip.Addr]net.HardwareAddr, map[bool]bool) {
	out, unread := map[netip.Addr]net.HardwareAddr{}, map[bool]bool{}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		ns, err := netlink.NeighList(0, family)
		for try := 0; errors.Is(err, netlink.ErrDumpInterrupted) && try < 5; try++ {
			ns, err = netlink.NeighList(0, family) // neighbours changed during the dump
		}
		if err != nil {
			unread[family == netlink.FAMILY_V4] = true
			continue
		}
		for _, n := range ns {
			ip, ok := netip.AddrFromSlice(n.IP)
			if ok && usable(n.State) && len(n.HardwareAddr) == 6 {
				out[ip.Unmap()] = slices.Clone(n.HardwareAddr)
			}
		}
	}
	return out, unread
}

// usable are the neighbour states with a link-layer address the kernel uses.
func usable(state int) bool {
	return state&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT) != 0
}

// resolve asks the kernel to resolve gw on the interface it routes it through (NTF_USE: the
// kernel sends the ARP request or neighbour solicitation, as for a packet to it).
func resolve(gw netip.Addr) {
	routes, err := netlink.RouteGet(gw.AsSlice())
	if err != nil || len(routes) == 0 || routes[0].Gw != nil {
		return // not on a link of this node: nothing to resolve here
	}
	family := netlink.FAMILY_V4
	if gw.Is6() {
		family = netlink.FAMILY_V6
	}
	_ = netlink.NeighSet(&netlink.Neigh{LinkIndex: routes[0].LinkIndex, Family: family, IP: gw.AsSlice(), Flags: netlink.NTF_USE})
}
