package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/nft"
	"github.com/egressd/egressd/dataplane/tunnel"
)

// egressIP prints what this node does for EgressIP: hosted egress IPs, the SNAT map,
// egressd's routing (egressctl routes adds the agent's BFD sessions), and the tunnel to egress
// nodes.
func egressIP(o options, out io.Writer) error {
	hosted, err := addresses.Hosted(addresses.DefaultProtocol)
	if err != nil {
		return fmt.Errorf("egress addresses: %w", err)
	}
	fmt.Fprintln(out, "egress IPs hosted here:")
	var lines []string
	for p, ifindex := range hosted {
		name := strconv.Itoa(ifindex)
		if ifi, err := net.InterfaceByIndex(ifindex); err == nil {
			name = ifi.Name
		}
		lines = append(lines, fmt.Sprintf("  %s on %s", p.Addr(), name))
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
	snat, err := nft.SNATEntries()
	if err != nil {
		return fmt.Errorf("SNAT map: %w", err)
	}
	fmt.Fprintln(out, "\npods SNATed here (pod -> egress IP):")
	for _, e := range snat {
		fmt.Fprintf(out, "  %s -> %s\n", e.Pod, e.EgressIP)
	}
	r, err := readRoutes(context.Background(), o)
	if err != nil {
		return fmt.Errorf("routing: %w", err)
	}
	fmt.Fprintln(out, "\nsteering (marked pod traffic to egress nodes or external gateways):")
	if err := printRouting(out, r); err != nil {
		return err
	}
	tun, err := tunnel.Inspect()
	if err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	if tun == nil {
		fmt.Fprintf(out, "\ntunnel %s: none\n", dataplane.TunnelDevice)
		return nil
	}
	fmt.Fprintf(out, "\ntunnel %s: vni %d port %d local %s mac %s\n", dataplane.TunnelDevice, tun.VNI, tun.Port, tun.Local, tun.MAC)
	for _, p := range tun.Peers {
		fmt.Fprintf(out, "  node %s (mac %s) next hops %v\n", p.Underlay, p.MAC, p.Nexthops)
	}
	return nil
}
