// Package cluster is what every feature's compile step reads: the cluster snapshot, this node's
// name and local pods, the cluster networks, DNS answers; and the node facts several features
// share (host addresses).
package cluster

import (
	"encoding/json"
	"net"
	"net/netip"
	"slices"

	"go4.org/netipx"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/watchers"
)

// Kinds of the objects the node state is compiled from.
const (
	KindPod            dataplane.Kind = "Pod"
	KindNode           dataplane.Kind = "Node"
	KindEgressFirewall dataplane.Kind = "EgressFirewall"
	KindEgressQoS      dataplane.Kind = "EgressQoS"
	KindEgressIP       dataplane.Kind = "EgressIP"
	KindEgressService  dataplane.Kind = "EgressService"
	KindExternalRoute  dataplane.Kind = "AdminPolicyBasedExternalRoute"
)

// HostCIDRsKey is upstream's Node annotation of every host address with its prefix length.
const HostCIDRsKey = "k8s.ovn.org/host-cidrs"

// Input of the compile steps.
type Input struct {
	Snap *watchers.Snapshot
	Node string
	// Networks (pod and service CIDRs) are the cluster networks.
	Networks []netip.Prefix
	// Lookup returns the current addresses of a DNS name.
	Lookup func(name string) []netip.Addr
	// Pods are this node's pods whose traffic egressd classifies (LocalPods).
	Pods []dataplane.Pod
}

// Steer sends one family of a local pod's traffic through the egress nodes Via (per-flow ECMP
// when several): what EgressIP and EgressService compile for a pod whose egress node is
// another, and merge gives a steering slot.
type Steer struct {
	Origin dataplane.Origin // the EgressIP or EgressService
	Pod    dataplane.Origin
	PodIP  netip.Addr
	Via    []netip.Addr
	// Spread, when more than 1: this node is an egress node of the pod's object too, and one in
	// Spread of the pod's flows leaves here (unmarked, SNATed here), the others through Via:
	// upstream spreads a pod's flows over every egress node, its own included.
	Spread uint8
}

// InNetworks reports whether a is inside the cluster networks.
func (in *Input) InNetworks(a netip.Addr) bool {
	return slices.ContainsFunc(in.Networks, func(p netip.Prefix) bool { return p.Contains(a) })
}

// HostAddresses are every host address of a node: the host-cidrs its agent publishes (all
// addresses, secondary ones included), and the Node's internal and external addresses.
func HostAddresses(n *corev1.Node) []netip.Addr {
	out := localAddresses(n)
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeExternalIP {
			out = append(out, ip)
		}
	}
	return out
}

// localAddresses are the addresses on a node (its agent's host-cidrs), and its internal ones:
// where kube-proxy serves node ports, unlike a cloud's external IP, which is not on the node.
func localAddresses(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	var cidrs []string
	if err := json.Unmarshal([]byte(n.Annotations[HostCIDRsKey]), &cidrs); err == nil {
		for _, c := range cidrs {
			if p, err := netip.ParsePrefix(c); err == nil {
				out = append(out, p.Addr())
			}
		}
	}
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
			out = append(out, ip)
		}
	}
	return out
}

// NetworkFlags are the cluster networks given on the command line.
type NetworkFlags struct {
	// Pods replace the discovered pod networks, for a CNI whose pod addresses do not come from
	// the Nodes' spec.podCIDRs (Calico's or Cilium's own IPAM).
	Pods []netip.Prefix
	// Services are added to the service networks the ServiceCIDR objects declare.
	Services []netip.Prefix
}

// Networks are the cluster networks: the pod networks (flags.Pods, else every Node's
// spec.podCIDRs, aggregated) and the service networks (flags.Services and the ServiceCIDR
// objects). Computed at every sync, so nodes and service ranges added later count.
func Networks(snap *watchers.Snapshot, flags NetworkFlags) []netip.Prefix {
	var b netipx.IPSetBuilder
	pods := flags.Pods
	if len(pods) == 0 {
		pods = nodePodCIDRs(snap)
	}
	for _, p := range append(slices.Clone(pods), flags.Services...) {
		b.AddPrefix(p.Masked())
	}
	if snap.ServiceCIDRs != nil {
		if cidrs, err := snap.ServiceCIDRs.List(labels.Everything()); err == nil {
			for _, c := range cidrs {
				for _, s := range c.Spec.CIDRs {
					if p, err := netip.ParsePrefix(s); err == nil {
						b.AddPrefix(p.Masked())
					}
				}
			}
		}
	}
	set, err := b.IPSet()
	if err != nil { // only on invalid prefixes, which were skipped
		return nil
	}
	return set.Prefixes()
}

// nodePodCIDRs are the pod CIDRs the cluster gave its nodes.
func nodePodCIDRs(snap *watchers.Snapshot) []netip.Prefix {
	if snap.Nodes == nil {
		return nil
	}
	nodes, err := snap.Nodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, n := range nodes {
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			if p, err := netip.ParsePrefix(c); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// ParseCIDR parses a destination CIDR of an API object as upstream does, with net.ParseCIDR:
// a prefix length with leading zeros ("10.0.0.0/08"), which the API server's cidr format
// accepts too, is taken; the error is upstream's ("invalid CIDR address: ..."). The prefix is
// masked; an IPv4-mapped IPv6 one of at least 96 bits is the IPv4 prefix it maps
// ("::ffff:10.0.0.0/104" is 10.0.0.0/8, as upstream's net.IPNet reads it).
func ParseCIDR(s string) (netip.Prefix, error) {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a, _ := netip.AddrFromSlice(n.IP)
	ones, bits := n.Mask.Size()
	if a.Is4In6() && bits == 128 && ones >= 96 {
		a, ones = a.Unmap(), ones-96
	}
	p := netip.PrefixFrom(a, ones)
	if !p.IsValid() {
		return netip.Prefix{}, &net.ParseError{Type: "CIDR address", Text: s}
	}
	return p.Masked(), nil
}
