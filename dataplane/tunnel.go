package dataplane

import (
	"crypto/sha256"
	"net"
	"net/netip"
)

// TunnelDevice is the name of egressd's VXLAN device (at most 15 bytes, as every interface
// name): steered packets that cannot cross the underlay with their pod source are encapsulated
// through it to the egress node, whose own device of that name decapsulates them.
const TunnelDevice = "egressd-vxlan"

// TunnelState is egressd's VXLAN tunnel: the device, and per egress node reached through it
// the entries that send a frame to that node. Routes use it as Nexthop{Gateway: one of a
// peer's Nexthops, Device: TunnelDevice}: the peer's primary IPv4 address, onlink, and
// TunnelGateway6 for IPv6.
type TunnelState struct {
	// Origin is what the device is for (this node).
	Origin Origin
	// Local is this node's underlay address, the outer source; invalid: no device.
	Local netip.Addr
	Peers []TunnelPeer
}

// TunnelPeer is one node the tunnel reaches.
type TunnelPeer struct {
	Origin Origin // the node
	// Underlay is the node's address the encapsulated packets are sent to (the family of
	// TunnelState.Local).
	Underlay netip.Addr
	// Nexthops are the addresses routes use as the gateway to the node, of either family:
	// each resolves, on the device, to the node's TunnelMAC.
	Nexthops []netip.Addr
}

// TunnelMAC is the tunnel device's MAC address on the node with underlay address a, locally
// administered, so that every node knows its peers' without exchanging them: 02:e5 and the
// IPv4 address (one to one), or 06:e5 and the first four bytes of the IPv6 address's SHA-256
// (the tunnel reports two peers that share one).
func TunnelMAC(a netip.Addr) net.HardwareAddr {
	if a.Is4() {
		b := a.As4()
		return net.HardwareAddr{0x02, 0xe5, b[0], b[1], b[2], b[3]}
	}
	b := a.As16()
	h := sha256.Sum256(b[:])
	return net.HardwareAddr{0x06, 0xe5, h[0], h[1], h[2], h[3]}
}

// TunnelGateway6 is the IPv6 gateway of routes to the peer with underlay address a: the
// link-local address (EUI-64) of the peer's tunnel MAC, which its device also takes. A global
// address of the peer cannot serve: the kernel refuses an onlink IPv6 gateway that the main
// table reaches through another device (the peer's primary network on the NIC).
func TunnelGateway6(a netip.Addr) netip.Addr {
	m := TunnelMAC(a)
	return netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80, 8: m[0] ^ 0x02, 9: m[1], 10: m[2], 11: 0xff, 12: 0xfe, 13: m[3], 14: m[4], 15: m[5]})
}
