// Package dataplane makes the kernel equal to a complete desired node state, idempotently, by
// diffing against what egressd owns (bpf maps and programs under the pin root, the nftables
// table inet egressd, routes, rules and addresses stamped with egressd's protocol). It knows
// nothing of Kubernetes: it receives plain values and returns per-object results.
//
// State has one section per kernel facility; each facility package (classifier, nft, routing,
// addresses, bfd, tunnel) programs its own section, and the composite Applier
// (dataplane/kernel) runs them in phases.
package dataplane

import (
	"context"
	"net/netip"
	"slices"
)

// State is the complete desired state of one node. Every element remembers the API object it
// came from (Origin) so that a failure or a counter maps back to that object.
type State struct {
	Classifier ClassifierState
	Nftables   NftablesState
	Routing    RoutingState
	// Addresses are the egress addresses this node hosts.
	Addresses []Address
	// BFD are the peers whose liveness gates nexthops of Routing.
	BFD []BFDPeer
	// Tunnel carries steered packets to egress nodes across an underlay that drops a pod's
	// source (routed fabrics, clouds).
	Tunnel TunnelState
}

// ClassifierState is what the tc classifier on pod-facing interfaces holds: the local pods with
// their marks, the cluster networks, and the EgressFirewall and EgressQoS tables.
type ClassifierState struct {
	// Pods are the pods of this node whose traffic egressd classifies: the classifier is
	// attached to the host interface facing each of them.
	Pods []Pod
	// ClusterNetworks (pod and service CIDRs) are never subject to EgressFirewall.
	ClusterNetworks []netip.Prefix
	// Frontends are Services' addresses and ports outside the service networks that kube-proxy
	// DNATs for pods on their node (load-balancer ingress IPs, external IPs): not subject to
	// EgressFirewall either, whose verdict on them is the backend's, after DNAT.
	Frontends []Frontend
	// SteerExempt are the destinations to which a pod's Mark is never applied: the cluster
	// networks and the nodes' addresses.
	SteerExempt []netip.Prefix
	Firewalls   []Firewall
	// FirewallsVersion, when not 0, identifies the content of Firewalls: a state with the same
	// version holds the same list (the classifier then skips reading a thousand firewalls'
	// rules again for a sync that brings a new pod); 0 says nothing, and the list is read.
	FirewallsVersion uint64
	QoS              []QoS
}

// Pod is a local pod and its addresses.
type Pod struct {
	Origin Origin
	IPs    []netip.Addr
	// QoSRules are the indices of the rules of its namespace's EgressQoS that select it.
	QoSRules []int
	// Mark is the routing mark of its egress (EgressIP, external route, EgressService), set in
	// skb->mark of every packet it sends that the firewall lets through, except to SteerExempt
	// destinations; 0 for none. It must lie within the classifier's mark mask.
	Mark uint32
	// Spread, when more than 1, leaves one in Spread of the pod's flows unmarked (by a hash of
	// the flow): this node is one of Spread egress nodes its flows are spread over.
	Spread uint8 `json:",omitempty"`
	// HostInterfaces are the host-side interfaces the CNI made for the pod's sandbox, as its
	// ADD reported them (none for a pod added before egressd's plugin was chained): a bridged
	// pod's bridge port is among them, and only the pod's addresses pass that port.
	HostInterfaces []string `json:",omitempty"`
}

// Equal reports whether p and o are the same entry (nil and empty lists alike).
func (p Pod) Equal(o Pod) bool {
	return p.Origin == o.Origin && p.Mark == o.Mark && p.Spread == o.Spread && slices.Equal(p.IPs, o.IPs) &&
		slices.Equal(p.QoSRules, o.QoSRules) && slices.Equal(p.HostInterfaces, o.HostInterfaces)
}

// Firewall is one namespace's EgressFirewall, compiled. Err set means it could not be
// compiled: what is enforced for the namespace stays as it is (fail closed).
type Firewall struct {
	Origin Origin
	Rules  []FirewallRule
	Err    error
	// Log is what the namespace's k8s.ovn.org/acl-logging annotation asks to log.
	Log ACLLog
}

// ACLLog holds the severities at which allowed and denied packets are logged; "" does not log.
type ACLLog struct {
	Allow, Deny string
}

// FirewallRule is one rule with every destination prefix it covers (CIDR, resolved DNS name,
// selected nodes' addresses). No ports means any port and protocol.
type FirewallRule struct {
	Index    int
	Deny     bool
	Prefixes []netip.Prefix
	Ports    []Port
	// Text describes the rule as written, for operators (egressctl).
	Text string
}

// Port is a protocol (IANA number) and destination port.
type Port struct {
	Protocol uint8
	Port     uint16
}

// Frontend is a Service's address with one of its ports.
type Frontend struct {
	Addr netip.Addr
	Port
}

// QoS is one namespace's EgressQoS, compiled; Err as for Firewall.
type QoS struct {
	Origin Origin
	Rules  []QoSRule
	Err    error
}

// QoSRule marks traffic to Prefixes (both families' default routes when the rule has no
// dstCIDR) with DSCP.
type QoSRule struct {
	Index    int
	DSCP     uint8
	Prefixes []netip.Prefix
	Text     string
}

// DefaultMarkMask are the skb->mark bits egressd stamps on steered packets (the class of their
// egress path), bits 16-23: clear of kube-proxy's 0x4000 and 0x8000 and Cilium's 0x0f00;
// configurable where the CNI uses them (Calico's default mask is 0xffff0000).
const DefaultMarkMask = 0x00ff0000

// Kind is the kind of the API object an element came from ("EgressFirewall", "Pod", ...).
type Kind string

// Origin names the API object (and rule) an element of State was compiled from.
type Origin struct {
	Kind            Kind
	Namespace, Name string
	Rule            int
}

func (o Origin) String() string {
	s := string(o.Kind) + " " + o.Name
	if o.Namespace != "" {
		s = string(o.Kind) + " " + o.Namespace + "/" + o.Name
	}
	return s
}

// Result says what an Apply did not manage to program, per originating object, and the facts
// of the node that the API should know.
type Result struct {
	Failed map[Origin]error
	// Removals are the removals that failed, by facility (routing, tunnel, addresses): what
	// the state no longer wants stays in the kernel meanwhile, and no object, wanting it no
	// more, reports it. The caller retries them.
	Removals map[string]error
	// HostCIDRs are the node's global unicast addresses with their prefix lengths (the
	// k8s.ovn.org/host-cidrs annotation), excluding addresses egressd itself adds.
	HostCIDRs []netip.Prefix
	// Conflicts are the settings of a CNI's programs on egressd's path that undo what it
	// programs, each with the number of places (Conflict.Of) where they do.
	Conflicts map[Conflict]int
}

// Conflict is a setting of a CNI's program that undoes what egressd programs: after the
// classifier on pods' interfaces, or on the node's devices.
type Conflict struct {
	// Program and Setting name them as the CNI does (cil_from_container, enable_identity_mark).
	Program, Setting string
	// Effect is what it does to the traffic, and what to set instead.
	Effect string
	// Of names what the count counts: "pod interfaces", "source NAT addresses".
	Of string
}

// Applier programs a desired state. Implementations are safe to call repeatedly with the same
// state (level-triggered callers do). A state and its lists are read only once handed to
// Apply: an implementation may keep them, to compare with the next state.
type Applier interface {
	Apply(ctx context.Context, s *State) Result
}

// PodsInForce hears, while an Apply is under way, of new pods that are in force: everything s
// holds for them is written (their interfaces attached last). failed holds the failures of what
// was applied before; the Apply goes on afterwards (removals, other interfaces).
type PodsInForce func(s *State, pods []Origin, failed map[Origin]error)
