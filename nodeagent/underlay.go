package nodeagent

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// SteeringMode says how a pod's node sends steered traffic (EgressIP, EgressService) to the
// egress node. Every node of a cluster must use the same.
type SteeringMode string

const (
	// SteerAuto routes directly to an egress node on this node's primary network, and through
	// the tunnel to one beyond it (a packet with a pod source may not cross a router); in a
	// cloud (nodes carrying the cloud's egress-ipconfig annotation) always through the tunnel.
	SteerAuto SteeringMode = "auto"
	// SteerDirect always routes directly (one L2 network, or a fabric that routes pod sources).
	SteerDirect SteeringMode = "direct"
	// SteerVXLAN always uses the tunnel (a cloud's source/destination check on one subnet).
	SteerVXLAN SteeringMode = "vxlan"
)

// Set reads the --egressip-steering flag.
func (m *SteeringMode) Set(s string) error {
	switch v := SteeringMode(strings.ToLower(s)); v {
	case SteerAuto, SteerDirect, SteerVXLAN:
		*m = v
		return nil
	}
	return fmt.Errorf("%q is not auto, direct or vxlan", s)
}

func (m *SteeringMode) String() string { return string(*m) }

// Type names the flag's values in the usage.
func (m *SteeringMode) Type() string { return "string" }

// underlay decides, per egress node, how this node reaches it, and collects the tunnel peers
// the chosen next hops need.
type underlay struct {
	mode  SteeringMode
	node  string
	local cluster.PrimaryIfAddr
	// nodes are the names of the other nodes, by each of their primary addresses.
	nodes     map[netip.Addr]string
	primaries map[string]cluster.PrimaryIfAddr
	peers     map[string]*dataplane.TunnelPeer
}

func newUnderlay(mode SteeringMode, node string, primaries map[string]cluster.PrimaryIfAddr) *underlay {
	u := &underlay{mode: mode, node: node, local: primaries[node], nodes: map[netip.Addr]string{},
		primaries: primaries, peers: map[string]*dataplane.TunnelPeer{}}
	for name, p := range primaries {
		for _, a := range []netip.Prefix{p.V4, p.V6} {
			if a.IsValid() && name != node {
				u.nodes[a.Addr()] = name
			}
		}
	}
	return u
}

// others4 are the other nodes' primary IPv4 addresses, in order.
func (u *underlay) others4() []netip.Addr {
	var out []netip.Addr
	for a := range u.nodes {
		if a.Is4() {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// endpoint is the underlay address of a node: its primary IPv4 address when this node has
// one (IPv6 traffic too goes over IPv4), else its primary IPv6 address.
func (u *underlay) endpoint(p cluster.PrimaryIfAddr) netip.Addr {
	if u.local.V4.IsValid() {
		return p.V4.Addr()
	}
	return p.V6.Addr()
}

// beyond reports whether the address a is off the primary network of p, the family's: a
// packet between them crosses a router (or p has no network of a's family).
func beyond(p cluster.PrimaryIfAddr, a netip.Addr) bool {
	own := p.V4
	if a.Is6() {
		own = p.V6
	}
	return !own.IsValid() || !own.Masked().Contains(a)
}

// hop is the next hop to the egress node whose primary address (of the steered family) is
// via: direct, or on the tunnel device (IPv4: the same address, onlink; IPv6: the link-local
// gateway of the node's tunnel MAC). A node whose underlay address is unknown (no primary
// address of the tunnel's family) is routed directly.
func (u *underlay) hop(via netip.Addr) dataplane.Nexthop {
	direct := dataplane.Nexthop{Gateway: via}
	name, ok := u.nodes[via]
	if !ok || u.mode == SteerDirect || (u.mode != SteerVXLAN && !beyond(u.local, via)) {
		return direct
	}
	local, remote := u.endpoint(u.local), u.endpoint(u.primaries[name])
	if !local.IsValid() || !remote.IsValid() {
		return direct
	}
	p := u.peers[name]
	if p == nil {
		p = &dataplane.TunnelPeer{Origin: dataplane.Origin{Kind: cluster.KindNode, Name: name}, Underlay: remote}
		u.peers[name] = p
	}
	hop := dataplane.Nexthop{Gateway: via, Device: dataplane.TunnelDevice, Onlink: true}
	if via.Is6() {
		hop = dataplane.Nexthop{Gateway: dataplane.TunnelGateway6(remote), Device: dataplane.TunnelDevice}
	}
	if !slices.Contains(p.Nexthops, hop.Gateway) {
		p.Nexthops = append(p.Nexthops, hop.Gateway)
		slices.SortFunc(p.Nexthops, netip.Addr.Compare)
	}
	return hop
}

// state is the tunnel this node needs: the device while it sends through it, or while it
// receives steered traffic (it SNATs pods of other nodes) that some node sends through it (in
// auto mode, a node beyond this node's primary network).
func (u *underlay) state(receives bool) dataplane.TunnelState {
	var s dataplane.TunnelState
	if u.mode == SteerDirect || (len(u.peers) == 0 && !(receives && u.sentTo())) {
		return s
	}
	s.Origin, s.Local = dataplane.Origin{Kind: cluster.KindNode, Name: u.node}, u.endpoint(u.local)
	for _, p := range u.peers {
		s.Peers = append(s.Peers, *p)
	}
	slices.SortFunc(s.Peers, func(a, b dataplane.TunnelPeer) int { return a.Underlay.Compare(b.Underlay) })
	return s
}

// sentTo reports whether some node sends its steered traffic to this one through the tunnel.
func (u *underlay) sentTo() bool {
	if u.mode == SteerVXLAN {
		return true
	}
	for name, p := range u.primaries {
		if name == u.node {
			continue
		}
		for _, a := range []netip.Addr{u.local.V4.Addr(), u.local.V6.Addr()} {
			if a.IsValid() && beyond(p, a) {
				return true
			}
		}
	}
	return false
}
