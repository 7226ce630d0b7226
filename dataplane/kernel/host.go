package kernel

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

// hostCIDRs are the global unicast addresses of the node, except those in the cluster networks
// (pod gateways on a CNI bridge are not host addresses; upstream likewise leaves out its
// management port), and egressd's own egress addresses.
func hostCIDRs(cluster []netip.Prefix, egress func(netip.Addr) bool) ([]netip.Prefix, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if egress(ip) {
			continue // egressd's own egress addresses are not the node's
		}
		if !ip.IsGlobalUnicast() || slices.ContainsFunc(cluster, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, ones))
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out, nil
}

// podFacing finds the host interface that faces a local pod: the interface of the directly
// connected route to its address (a per-pod veth, or the bridge of a bridged CNI).
func podFacing(ip netip.Addr) (string, int, error) {
	routes, err := netlink.RouteGet(ip.AsSlice())
	if err != nil || len(routes) == 0 {
		return "", 0, fmt.Errorf("no route to pod address %s: %v", ip, err)
	}
	r := routes[0]
	if r.Gw != nil {
		return "", 0, fmt.Errorf("pod address %s is routed via %s, not on a local interface", ip, r.Gw)
	}
	l, err := netlink.LinkByIndex(r.LinkIndex)
	if err != nil {
		return "", 0, fmt.Errorf("interface %d facing pod %s: %w", r.LinkIndex, ip, err)
	}
	if l.Type() == "device" && l.Attrs().Name == "lo" {
		return "", 0, fmt.Errorf("pod address %s is local to the node", ip)
	}
	return l.Attrs().Name, l.Attrs().Index, nil
}
