package cluster

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// PrimaryIfAddrAnnotation is upstream's Node annotation of the node's primary interface
// address, see PrimaryIfAddr. Each agent publishes its own (nodeagent/status); the features
// that send pods out through a chosen node (EgressIP, EgressService, EgressRouter) and the pod
// announcements read everyone's.
const PrimaryIfAddrAnnotation = "k8s.ovn.org/node-primary-ifaddr"

// PrimaryIfAddr is the node-primary-ifaddr annotation: the address and prefix length of the
// node's primary interface per family (e.g. 10.0.0.2/24), unmasked as upstream writes it. Its
// subnets are the primary network, which hosts egress IPs first.
type PrimaryIfAddr struct {
	V4, V6 netip.Prefix
}

// primaryIfAddrJSON is upstream's wire form, {"ipv4":"10.0.0.2/24","ipv6":"fd00::2/64"}.
type primaryIfAddrJSON struct {
	IPv4 string `json:"ipv4,omitempty"`
	IPv6 string `json:"ipv6,omitempty"`
}

// ParsePrimaryIfAddr reads the annotation value. As upstream, a value without any address is an
// error: such a node has no egress IP configuration and cannot host egress IPs.
func ParsePrimaryIfAddr(s string) (PrimaryIfAddr, error) {
	var raw primaryIfAddrJSON
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return PrimaryIfAddr{}, fmt.Errorf("failed to unmarshal annotation %s: %w", PrimaryIfAddrAnnotation, err)
	}
	if raw.IPv4 == "" && raw.IPv6 == "" {
		return PrimaryIfAddr{}, fmt.Errorf("annotation %s does not have any IP information set", PrimaryIfAddrAnnotation)
	}
	var p PrimaryIfAddr
	var err error
	if p.V4, err = ParseFamilyPrefix(raw.IPv4, true, PrimaryIfAddrAnnotation); err != nil {
		return PrimaryIfAddr{}, err
	}
	if p.V6, err = ParseFamilyPrefix(raw.IPv6, false, PrimaryIfAddrAnnotation); err != nil {
		return PrimaryIfAddr{}, err
	}
	return p, nil
}

// ParseFamilyPrefix reads one family's prefix of a node annotation; "" is none.
func ParseFamilyPrefix(s string, v4 bool, annotation string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("annotation %s: %w", annotation, err)
	}
	if p.Addr().Is4() != v4 {
		return netip.Prefix{}, fmt.Errorf("annotation %s: %s is not an address of its family", annotation, s)
	}
	return p, nil
}

// Format is the annotation value the agent publishes on its own Node, in upstream's form.
func (p PrimaryIfAddr) Format() string {
	var raw primaryIfAddrJSON
	if p.V4.IsValid() {
		raw.IPv4 = p.V4.String()
	}
	if p.V6.IsValid() {
		raw.IPv6 = p.V6.String()
	}
	b, _ := json.Marshal(raw) // a struct of two strings always marshals
	return string(b)
}

// ProbeAddress is the address the leader probes a node's agent on: its primary IPv4 address,
// else its primary IPv6 address.
func (p PrimaryIfAddr) ProbeAddress() netip.Addr {
	if p.V4.IsValid() {
		return p.V4.Addr()
	}
	return p.V6.Addr()
}

// ProbeTarget is where the leader probes node n's agent: its primary address at port. A Node
// without the annotation (not yet published, or one egressd does not run on) has none, and costs
// no parse: the controllers ask for every Node at each reconcile.
func ProbeTarget(n *corev1.Node, port uint16) (netip.AddrPort, bool) {
	v, ok := n.Annotations[PrimaryIfAddrAnnotation]
	if !ok {
		return netip.AddrPort{}, false
	}
	p, err := ParsePrimaryIfAddr(v)
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(p.ProbeAddress(), port), true
}

// Contains says whether the primary network holds ip.
func (p PrimaryIfAddr) Contains(ip netip.Addr) bool {
	return p.V4.IsValid() && p.V4.Contains(ip) || p.V6.IsValid() && p.V6.Contains(ip)
}

// NodeNetworks are, for the features that send pods out through a chosen node (EgressIP,
// EgressService), every node's primary interface address, and the destinations they never
// apply to: the cluster networks and every node address (pod to node traffic keeps its node IP
// source, as upstream).
func NodeNetworks(in *Input, nodes []*corev1.Node) (map[string]PrimaryIfAddr, []netip.Prefix) {
	primary := map[string]PrimaryIfAddr{}
	exempt := slices.Clone(in.Networks)
	for _, n := range nodes {
		if p, err := ParsePrimaryIfAddr(n.Annotations[PrimaryIfAddrAnnotation]); err == nil {
			primary[n.Name] = p
			for _, a := range []netip.Prefix{p.V4, p.V6} {
				if a.IsValid() {
					exempt = append(exempt, netip.PrefixFrom(a.Addr(), a.Addr().BitLen()))
				}
			}
		}
		for _, a := range HostAddresses(n) {
			exempt = append(exempt, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return primary, exempt
}
