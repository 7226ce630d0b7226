// Package router configures a redirect-mode egress router inside a pod's network namespace: a
// macvlan on a node NIC with the router's addresses, the default routes via the gateways, the
// pod's cluster routes kept on its primary interface, forwarding, gratuitous ARP / unsolicited
// NA, and the nftables table inet egressd_router that DNATs each redirect rule, sends other
// traffic to the fallback address (or rejects it) and SNATs what leaves on the macvlan.
//
// It knows nothing of Kubernetes: nodeagent/egressrouter compiles a Config from an EgressRouter,
// and egressd's CNI plugin (root, at the pod's ADD) applies it; see nodeagent/egressrouter for
// why the plugin and not the agent.
package router

import (
	"fmt"
	"net/netip"
)

// Interface is the name of the router's macvlan inside the pod (Multus' first extra interface
// is net1 too, so upstream users find it where they expect it).
const Interface = "net1"

// tableName is the router's nftables table inside the pod's namespace.
const tableName = "egressd_router"

// Mode is a macvlan mode.
type Mode string

// Macvlan modes (the EgressRouter API's names).
const (
	Bridge   Mode = "Bridge"
	Private  Mode = "Private"
	VEPA     Mode = "VEPA"
	Passthru Mode = "Passthru"
)

// Protocol numbers of the redirect rules.
const (
	TCP  uint8 = 6
	UDP  uint8 = 17
	SCTP uint8 = 132
)

// Rule redirects one protocol and port arriving from the cluster side to Destination.
type Rule struct {
	Protocol    uint8
	Port        uint16
	Destination netip.AddrPort
}

// Config is one router.
type Config struct {
	// Master is the node NIC the macvlan sits on; empty: the link holding an address in the
	// subnet of the first address, else the link of the node's default route.
	Master string `json:"master,omitempty"`
	Mode   Mode   `json:"mode"`
	// Addresses are all put on the macvlan; the first of each family is the SNAT source.
	Addresses []netip.Prefix `json:"addresses"`
	// Gateways are the default route of each family (at most one each).
	Gateways []netip.Addr `json:"gateways,omitempty"`
	Rules    []Rule       `json:"rules,omitempty"`
	// Fallback receives what no rule matches (of its family); unset: that traffic is rejected.
	Fallback netip.Addr `json:"fallback,omitzero"`
	// ClusterNetworks stay routed through the pod's primary interface (eth0) when the default
	// route moves to the macvlan, so that replies reach the clients.
	ClusterNetworks []netip.Prefix `json:"clusterNetworks,omitempty"`
}

// source is the SNAT address of a family: the first address of that family.
func (c *Config) source(v4 bool) (netip.Addr, bool) {
	for _, p := range c.Addresses {
		if p.Addr().Is4() == v4 {
			return p.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// Validate checks what the kernel would otherwise refuse halfway through.
func (c *Config) Validate() error {
	switch c.Mode {
	case Bridge, Private, VEPA, Passthru:
	default:
		return fmt.Errorf("macvlan mode %q is not Bridge, Private, VEPA or Passthru", c.Mode)
	}
	if len(c.Addresses) == 0 {
		return fmt.Errorf("no address")
	}
	seen := map[bool]bool{}
	for _, g := range c.Gateways {
		if seen[g.Is4()] {
			return fmt.Errorf("two gateways of one family (%s)", g)
		}
		seen[g.Is4()] = true
		if _, ok := c.source(g.Is4()); !ok {
			return fmt.Errorf("gateway %s has no address of its family to leave from", g)
		}
	}
	for _, r := range c.Rules {
		if _, ok := c.source(r.Destination.Addr().Is4()); !ok {
			return fmt.Errorf("destination %s has no router address of its family", r.Destination.Addr())
		}
	}
	if c.Fallback.IsValid() {
		if _, ok := c.source(c.Fallback.Is4()); !ok {
			return fmt.Errorf("fallback %s has no router address of its family", c.Fallback)
		}
	}
	return nil
}
