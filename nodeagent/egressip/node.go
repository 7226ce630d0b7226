package egressip

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/nodeagent/cluster"
)

// AssignableLabel is upstream's label of a node that may host egress IPs (SEMANTICS.md §0.2);
// its value is ignored.
const AssignableLabel = "k8s.ovn.org/egress-assignable"

// parseHostCIDRs reads the host-cidrs annotation value.
func parseHostCIDRs(s string) ([]netip.Prefix, error) {
	var list []string
	if err := json.Unmarshal([]byte(s), &list); err != nil {
		return nil, fmt.Errorf("failed to unmarshal annotation %s: %w", cluster.HostCIDRsKey, err)
	}
	out := make([]netip.Prefix, 0, len(list))
	for _, c := range list {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w", cluster.HostCIDRsKey, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// Node is what the assignment needs to know of a node.
type Node struct {
	Name string
	// Labeled is true when the node carries AssignableLabel.
	Labeled bool
	// Ready is the NodeReady condition.
	Ready bool
	// Reachable is the leader's latest health probe of the node's agent.
	Reachable bool
	// Primary is the node's primary interface; a node without it cannot host egress IPs.
	Primary cluster.PrimaryIfAddr
	// HostCIDRs are the node's host addresses with prefix lengths: the secondary networks
	// that may host an egress IP, and addresses an egress IP must not equal.
	HostCIDRs []netip.Prefix
	// Addresses are further addresses of the node (its status addresses) an egress IP must
	// not equal.
	Addresses []netip.Addr
	// Cloud is set in cloud mode: only its subnets host egress IPs, within its capacity. A node
	// without the cloud's annotation has an empty one and hosts nothing.
	Cloud *CloudConfig
}

// NodeFromAPI reads a Node object; reachable comes from the leader's health probes, cloud says
// the cluster is in cloud mode. The Node is usable even with an error: what could not be parsed
// is left empty (no primary interface or cloud configuration: the node hosts nothing; no host
// CIDRs: no secondary networks).
func NodeFromAPI(n *corev1.Node, reachable, cloud bool) (Node, error) {
	out := Node{Name: n.Name, Reachable: reachable}
	_, out.Labeled = n.Labels[AssignableLabel]
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Ready = c.Status == corev1.ConditionTrue
			break
		}
	}
	var errs []error
	if v, ok := n.Annotations[cluster.PrimaryIfAddrAnnotation]; ok {
		p, err := cluster.ParsePrimaryIfAddr(v)
		out.Primary = p
		errs = append(errs, err)
	}
	if v, ok := n.Annotations[cluster.HostCIDRsKey]; ok {
		c, err := parseHostCIDRs(v)
		out.HostCIDRs = c
		errs = append(errs, err)
	}
	if cloud {
		out.Cloud = &CloudConfig{}
		if v, ok := n.Annotations[CloudConfigAnnotation]; ok {
			c, err := ParseCloudConfig(v)
			*out.Cloud = c
			errs = append(errs, err)
		}
	}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out.Addresses = append(out.Addresses, ip.Unmap())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return out, nil
}

// configured says whether the node has an egress IP configuration at all (in cloud mode, the
// cloud's too); upstream keeps other nodes out of its allocator, so their status entries are
// invalid.
func (n *Node) configured() bool {
	if n.Cloud != nil && !n.Cloud.V4.IsValid() && !n.Cloud.V6.IsValid() {
		return false
	}
	return n.Primary.V4.IsValid() || n.Primary.V6.IsValid()
}

// assignable is upstream's test for a node that may take new egress IPs and keep old ones.
func (n *Node) assignable() bool {
	return n.configured() && n.Labeled && n.Ready && n.Reachable
}

// inPrimary says whether the primary network can host ip.
func (n *Node) inPrimary(ip netip.Addr) bool { return n.Primary.Contains(ip) }

// secondaryNetwork is the longest host CIDR of the node, other than the primary interface's
// and of a global unicast address, that contains ip (upstream's secondary host network).
func (n *Node) secondaryNetwork(ip netip.Addr) (netip.Prefix, bool) {
	var best netip.Prefix
	for _, c := range n.HostCIDRs {
		if c == n.Primary.V4 || c == n.Primary.V6 || !c.Addr().IsGlobalUnicast() || !c.Contains(ip) {
			continue
		}
		if !best.IsValid() || c.Bits() > best.Bits() {
			best = c
		}
	}
	return best.Masked(), best.IsValid()
}

// canHost says whether some network of the node (primary first, then secondary; in cloud mode
// a cloud subnet) can host ip.
func (n *Node) canHost(ip netip.Addr) bool {
	if n.Cloud != nil {
		return n.Cloud.contains(ip)
	}
	if n.inPrimary(ip) {
		return true
	}
	_, ok := n.secondaryNetwork(ip)
	return ok
}
