package main

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"

	"github.com/egressd/egressd/dataplane/addresses"
	"github.com/egressd/egressd/dataplane/nft"
)

// egressIPReport is what this node does for EgressIP: the egress IPs it hosts, the pods it
// SNATs to them, and egressd's routing (egressctl routes adds the agent's BFD sessions).
type egressIPReport struct {
	Hosted []hostedAddress `json:"hosted"`
	SNAT   []snatEntry     `json:"snat"`
	// Steering is egressd's routing: marked pod traffic to egress nodes or external gateways.
	Steering     routingReport `json:"steering"`
	MetricsError string        `json:"metricsError,omitempty"`
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
	return r.Steering.writeText(out)
}
