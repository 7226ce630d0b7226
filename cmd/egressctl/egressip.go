package main

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/dataplane/tunnel"
)

// egressIPReport is what this node does for EgressIP: the egress IPs it hosts, the pods it
// SNATs to them, egressd's routing (egressctl routes adds the agent's BFD sessions), and the
// tunnel to egress nodes.
type egressIPReport struct {
	Hosted []hostedAddress `json:"hosted"`
	SNAT   []snatEntry     `json:"snat"`
	// Steering is egressd's routing: marked pod traffic to egress nodes or external gateways.
	Steering     routingReport `json:"steering"`
	MetricsError string        `json:"metricsError,omitempty"`
	// Tunnel is egressd's VXLAN device; null when the node has none.
	Tunnel *tunnelReport `json:"tunnel"`
}

// tunnelReport is egressd's VXLAN tunnel: its identity, and the egress nodes it reaches.
type tunnelReport struct {
	Device string       `json:"device"`
	VNI    int          `json:"vni"`
	Port   int          `json:"port"`
	Local  netip.Addr   `json:"local"`
	MAC    string       `json:"mac"`
	Peers  []tunnelPeer `json:"peers"`
}

// tunnelPeer is one node the tunnel reaches: its underlay address, MAC, and the next hops
// that resolve to it.
type tunnelPeer struct {
	Underlay netip.Addr   `json:"underlay"`
	MAC      string       `json:"mac"`
	Nexthops []netip.Addr `json:"nexthops"`
}

func readTunnel() (*tunnelReport, error) {
	info, err := tunnel.Inspect()
	if err != nil || info == nil {
		return nil, err
	}
	r := &tunnelReport{Device: dataplane.TunnelDevice, VNI: info.VNI, Port: info.Port, Local: info.Local, MAC: info.MAC, Peers: []tunnelPeer{}}
	for _, p := range info.Peers {
		r.Peers = append(r.Peers, tunnelPeer{Underlay: p.Underlay, MAC: p.MAC, Nexthops: p.Nexthops})
	}
	return r, nil
}

// hostedAddress is an egress IP on one of this node's interfaces.
type hostedAddress struct {
	Address   netip.Addr `json:"address"`
	Interface string     `json:"interface"`
}

// snatEntry is a pod address this node SNATs to an egress IP.
type snatEntry struct {
	Pod      netip.Addr `json:"pod"`
	EgressIP netip.Addr `json:"egressIP"`
}

func readEgressIP(o options) (egressIPReport, error) {
	r := egressIPReport{SNAT: []snatEntry{}}
	var err error
	if r.Hosted, err = readHosted(); err != nil {
		return r, err
	}
	snat, err := nft.SNATEntries()
	if err != nil {
		return r, fmt.Errorf("SNAT map: %w", err)
	}
	for _, e := range snat {
		r.SNAT = append(r.SNAT, snatEntry{Pod: e.Pod, EgressIP: e.EgressIP})
	}
	routes, err := readRoutes(o)
	if err != nil {
		return r, fmt.Errorf("routing: %w", err)
	}
	r.Steering, r.MetricsError = routes.routingReport, routes.MetricsError
	if r.Tunnel, err = readTunnel(); err != nil {
		return r, fmt.Errorf("tunnel: %w", err)
	}
	return r, nil
}

// readHosted reads the egress addresses egressd added on this node, by address.
func readHosted() ([]hostedAddress, error) {
	hosted, err := addresses.Hosted(addresses.DefaultProtocol)
	if err != nil {
		return nil, fmt.Errorf("egress addresses: %w", err)
	}
	out := []hostedAddress{}
	for p, ifindex := range hosted {
		name := strconv.Itoa(ifindex)
		if ifi, err := net.InterfaceByIndex(ifindex); err == nil {
			name = ifi.Name
		}
		out = append(out, hostedAddress{Address: p.Addr(), Interface: name})
	}
	slices.SortFunc(out, func(a, b hostedAddress) int {
		return cmp.Or(a.Address.Compare(b.Address), cmp.Compare(a.Interface, b.Interface))
	})
	return out, nil
}

func (r egressIPReport) writeText(out io.Writer) error {
	fmt.Fprintln(out, "egress IPs hosted here:")
	for _, h := range r.Hosted {
		fmt.Fprintf(out, "  %s on %s\n", h.Address, h.Interface)
	}
	fmt.Fprintln(out, "\npods SNATed here (pod -> egress IP):")
	for _, e := range r.SNAT {
		fmt.Fprintf(out, "  %s -> %s\n", e.Pod, e.EgressIP)
	}
	fmt.Fprintln(out, "\nsteering (marked pod traffic to egress nodes or external gateways):")
	if err := r.Steering.writeText(out); err != nil {
		return err
	}
	if r.Tunnel == nil {
		fmt.Fprintf(out, "\ntunnel %s: none\n", dataplane.TunnelDevice)
		return nil
	}
	t := r.Tunnel
	fmt.Fprintf(out, "\ntunnel %s: vni %d port %d local %s mac %s\n", t.Device, t.VNI, t.Port, t.Local, t.MAC)
	for _, p := range t.Peers {
		fmt.Fprintf(out, "  node %s (mac %s) next hops %v\n", p.Underlay, p.MAC, p.Nexthops)
	}
	return nil
}
