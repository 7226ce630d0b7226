package dataplane

import (
	"net/netip"
)

// RoutingState is egressd's policy routing: rules that select a table by firewall mark, and the
// tables. Rule priorities and table numbers are offsets inside the ranges the node reserves for
// egressd (dataplane/routing maps them), so the node agent never picks kernel numbers.
type RoutingState struct {
	Rules  []RouteRule
	Tables []RouteTable
	// SteeredFrom are the other nodes' primary IPv4 addresses and SteeredPods their pod
	// networks, while this node SNATs pods of other nodes (EgressIP, EgressService): packets
	// the nodes steer here directly arrive on the interface that reaches them, with pod sources
	// that main may route through the CNI's overlay instead (flannel.1, tunl0), which a strict
	// reverse path filter drops (the kernel side loosens it).
	SteeredFrom []netip.Addr
	SteeredPods []netip.Prefix
}

// RouteRule is `ip rule [from Src] fwmark Mark/Mask lookup Table`, for one family.
type RouteRule struct {
	Origin Origin
	// Priority is the offset inside egressd's rule priority range; lower is consulted first.
	Priority int
	IPv6     bool
	Mark     uint32
	Mask     uint32
	// Src, when valid, restricts the rule to that source prefix.
	Src netip.Prefix
	// Table is the offset inside egressd's table range.
	Table int
	// Network, when set, is the table to look up instead: a kernel table number, a name of
	// /etc/iproute2/rt_tables, or a VRF device (its table) — EgressService's spec.network.
	Network string
}

// RouteTable is one routing table of egressd (both families).
type RouteTable struct {
	Origin Origin
	// ID is the offset inside egressd's table range.
	ID     int
	Routes []Route
	// LinkOf names egress addresses, at most one per family, whose interface the table sends
	// traffic of the address's family through: the kernel side fills in a copy of that
	// interface's routes in the main table (without their preferred source), and a default
	// route through it when none is copied, as upstream's per-interface tables for egress IPs
	// on secondary host networks. While no interface holds the address, a blackhole: dropped,
	// never leaked.
	LinkOf []netip.Addr
}

// Route is one route of a table. Exactly one of Via, Nexthops, Blackhole and Throw says where
// it goes.
type Route struct {
	Dst netip.Prefix
	// Via is a single next hop.
	Via *Nexthop
	// Nexthops are spread per flow (ECMP) as a kernel nexthop group; members whose BFD session
	// is not Up are left out, and a group with no live member turns into a blackhole (drop
	// rather than leak through the main table).
	Nexthops []Nexthop
	// Blackhole drops what the route matches.
	Blackhole bool
	// Throw sends the lookup of what the route matches on to the next rules (main): a steering
	// table's IPv6 cluster networks, which marked packets never go to, so that a reverse path
	// check keyed by the mark (firewalld's IPv6_rpfilter) finds a pod source where main has it.
	Throw bool `json:",omitempty"`
	// Src is the preferred source address, when valid.
	Src netip.Addr
}

// Nexthop is a gateway, a device, or both.
type Nexthop struct {
	Gateway netip.Addr
	// Device is the interface name; empty means the one the kernel resolves for Gateway.
	Device string
	// BFD makes the member depend on the BFD session to Gateway (BFDPeer.Peer) being Up.
	BFD bool
	// Onlink takes Gateway as reachable on Device without a route to it: a tunnel peer, whose
	// address is on no network of the tunnel device.
	Onlink bool
}
