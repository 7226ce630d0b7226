package kernel

import (
	"net/netip"
	"slices"
)

// hostCIDRs are the node's global unicast addresses (those egressd did not add as egress
// addresses), except those in the cluster networks: pod gateways on a CNI bridge are not host
// addresses; upstream likewise leaves out its management port.
func hostCIDRs(cluster []netip.Prefix, node []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range node {
		ip := p.Addr().Unmap()
		if !ip.IsGlobalUnicast() || slices.ContainsFunc(cluster, func(c netip.Prefix) bool { return c.Contains(ip) }) {
			continue
		}
		out = append(out, netip.PrefixFrom(ip, p.Bits()))
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}
