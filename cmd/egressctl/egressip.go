package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"

	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/nft"
)

// egressIP prints what this node does for EgressIP: hosted egress IPs, the SNAT map, and
// egressd's routing (egressctl routes adds the agent's BFD sessions).
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
	return printRouting(out, r)
}
