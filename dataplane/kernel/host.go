package kernel

import (
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
