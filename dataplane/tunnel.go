package dataplane

import "net/netip"

// TunnelDevice is the name of egressd's VXLAN device (at most 15 bytes, as every interface
// name): steered packets that cannot cross the underlay with their pod source are encapsulated
// through it to the egress node, whose own device of that name decapsulates them.
const TunnelDevice = "egressd-vxlan"

// TunnelState is egressd's VXLAN tunnel: the device, and per egress node reached through it
// the entries that send a frame to that node. Routes use it as Nexthop{Gateway: one of a
// peer's Nexthops, Device: TunnelDevice, Onlink: true}.
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
	// Nexthops are the addresses routes use as the gateway to the node, of either family
	// (the node's primary addresses): each resolves, on the device, to the node's MAC.
	Nexthops []netip.Addr
}
