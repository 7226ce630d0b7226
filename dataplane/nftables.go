package dataplane

import (
	"net"
	"net/netip"
)

// NftablesState is what the table inet egressd holds.
type NftablesState struct {
	// BackendDenies are what EgressFirewall denies of local pods' traffic to Service backends
	// outside the cluster networks. The classifier runs before DNAT and sees only the service
	// address (exempt as a cluster network), so these are judged after DNAT by the backend.
	BackendDenies []BackendDeny
	// KeepBackendDenies are the namespaces whose EgressFirewall failed to compile: their
	// elements stay as they were (fail closed).
	KeepBackendDenies []string
	// BackendDSCP are the DSCP values EgressQoS gives local pods' traffic to Service backends
	// outside the cluster networks, set after DNAT (upstream's to-lport QoS sees the backend;
	// the classifier, before DNAT, sees the service address).
	BackendDSCP []BackendDSCP
	// KeepBackendDSCP are the namespaces whose EgressQoS failed to compile: their elements
	// stay as they were.
	KeepBackendDSCP []string
	// Frontends are the Services' frontends the classifier lets through (ClassifierState);
	// FirewalledPods the local pods under an EgressFirewall: a flow of one to a frontend that
	// leaves without DNAT is dropped (it would reach the address itself unjudged).
	Frontends      []Frontend
	FirewalledPods []netip.Addr
	// DNSSnoop hands the DNS answers to some local pods to the agent before they reach them
	// (EgressFirewall's dnsName rules).
	DNSSnoop DNSSnoop

	// EgressIP. The classifier stamps the bits of SteerMask in skb->mark on the packets of
	// local pods that leave through another node (their egress node); policy routing sends them
	// there with the pod IP intact. Element keys are per family; a family's set may be empty.

	// SteerMask are the skb->mark bits that steer a packet to another node (default
	// 0x00ff0000). Reply packets get them cleared before routing, so that replies of
	// connections initiated from outside (NodePort, LoadBalancer, direct) are never steered.
	// Zero disables the rules that test the mark.
	SteerMask uint32
	// SNAT are the pods this node serves as egress node, local ones and those of other nodes
	// whose packets arrive here: their packets leave with the egress IP, unless the destination
	// is exempt. At most one per pod address (the first wins; later ones fail).
	SNAT []SNAT
	// Exempt are the destinations never SNATed to an egress IP nor guarded: the cluster
	// networks (pods, services) and every node address, as prefixes.
	Exempt []netip.Prefix
	// Guarded are the addresses of every pod selected by an EgressIP, local or of other nodes:
	// an unmarked packet from one of them to a non-exempt destination that still carries the
	// pod address after every NAT is dropped rather than leaked.
	Guarded []netip.Addr
	// Spread are the local pods on this egress node whose flows are also steered to the other
	// egress nodes of their EgressIP (Pod.Spread): their steered packets keep their pod source,
	// their others get the SNAT here.
	Spread []netip.Addr
	// RemotePods are the pod networks of the other nodes (their spec.podCIDRs), set while some
	// pod is served by an EgressIP or EgressService, when packets of other nodes' pods may be
	// steered here. Such a packet that no SNAT took here, to a non-exempt destination, is from a
	// pod this node does not know yet (younger than its view of the API): it is dropped, not
	// masqueraded, since the CNI's NAT would bind the flow to this node's address for its life.
	// Its sender's retransmission leaves with the egress IP once the pod is known.
	RemotePods []netip.Prefix
	// Secondary are the egress IPs of SNAT on a secondary network of this node: a packet that
	// leaves with one of them as its source through another interface than the one holding it
	// is dropped (its table was not there yet, or its interface went down).
	Secondary []netip.Addr
	// SecondaryMarks are the marks (under SteerMask) of the tables of Secondary's IPv6 egress
	// IPs (those that copy their interface's routes). The reply packets of the connections
	// SNATed to one carry its mark from conntrack to just before routing, and so through the
	// reverse path checks of firewalls that look their source up with the mark (firewalld's
	// IPv6_rpfilter: `fib saddr . mark . iif`, ip6tables' `rpfilter --validmark`): they arrive
	// through the egress IP's interface, where main may route their source elsewhere.
	SecondaryMarks []SecondaryMark
	// SteerNexthops are where a steered packet may leave towards: the egress node reached with
	// its mark (the route's nexthop address). A steered packet leaving elsewhere with its pod
	// source is dropped.
	SteerNexthops []SteerNexthop
	// SteerDevices are interfaces a steered packet may always leave through (egressd's tunnel to
	// the egress nodes).
	SteerDevices []string
	// Steered are the pod addresses steered by a mark (under SteerMask): the local pods the
	// classifier steers, and the other nodes' pods this node SNATs to an egress IP on a
	// secondary network (Remote). A local pod's packet that DNAT sent to a destination outside
	// Exempt and that is still unmarked before the routing decision gets the pod's mark: the
	// classifier runs before DNAT and leaves a packet to a Service address (exempt) unmarked,
	// where upstream's reroute policies match after OVN's load balancer. A remote pod's packet
	// to a destination outside Exempt (after DNAT here, if any), which arrives from the wire
	// where no classifier saw it, gets its mark.
	Steered []SteeredPod
	// Replies are the other nodes' pods SNATed here: the reply packets of their connections get
	// Mark under SteerMask before the SNAT is undone, whose table routes them back to the
	// pod's node the way its steered packets come (nodeagent/replies.go).
	Replies []SteeredPod
	// ReturnPaths send the replies of connections that a gateway forwards to local pods back
	// through that gateway (upstream's ecmp_symmetric_reply), by its Mark under SteerMask.
	ReturnPaths []ReturnPath
}

// DNSSnoop hands the DNS answers to some local pods to the agent before they reach them: the
// kernel holds each answer until the agent, having installed the addresses it holds, lets it
// go on, so the pod's connections to them find them already allowed.
type DNSSnoop struct {
	// Pods are the local pods whose DNS answers the agent reads (those of namespaces with
	// dnsName rules): each address with its pod's namespace, which what an answer teaches is
	// counted against. None: no answer is queued.
	Pods []SnoopedPod
	// Queue is the NFQUEUE number the agent reads them on. With no reader on it, answers pass
	// (the firewall still judges the connections).
	Queue uint16
	// Resolvers are the DNS servers whose answers are read (their addresses as the answers
	// leave them: a DNS Service's endpoints, and its cluster IPs for a resolver on the node). A
	// pod that asked a server it runs itself (cluster destinations are never firewalled) would
	// otherwise teach its namespace any address for the names its rules allow.
	Resolvers []netip.Addr
}

// SnoopedPod is an address of a pod whose DNS answers are read, and the pod's namespace.
type SnoopedPod struct {
	IP        netip.Addr
	Namespace string
}

// SecondaryMark is an egress IP on a secondary network and the mark of its table.
type SecondaryMark struct {
	EgressIP netip.Addr
	Mark     uint32
}

// SteeredPod is a pod address and the mark that steers it.
type SteeredPod struct {
	Pod  netip.Addr
	Mark uint32
	// Remote says the pod is another node's (see NftablesState.Steered).
	Remote bool
}

// ReturnPath is one external gateway's return path: a new connection that arrives from the
// gateway's MAC for one of Pods gets Mark in its conntrack mark, and its reply packets get Mark
// in skb->mark, which policy routing sends back through the gateway. When the path goes (the
// gateway is no longer wanted, or its BFD session is not Up) the conntrack entries carrying
// Mark are deleted, so those connections are tracked afresh.
type ReturnPath struct {
	Origin  Origin
	Gateway netip.Addr
	// BFD makes the path depend on the BFD session to Gateway being Up.
	BFD  bool
	Mark uint32
	Pods []netip.Addr // of Gateway's family
	// MAC is Gateway's link-layer address: the kernel Applier fills it from the node's
	// neighbour table (callers leave it empty); a path without one is not programmed.
	MAC net.HardwareAddr
}

// SNAT rewrites the source of a pod's packets to an egress IP of the same family.
type SNAT struct {
	Origin Origin // the EgressIP
	Pod    netip.Addr
	To     netip.Addr
}

// SteerNexthop allows packets carrying Mark (under SteerMask) to leave towards Nexthop, the
// egress node's address as the route to it names it.
type SteerNexthop struct {
	Mark    uint32
	Nexthop netip.Addr
}

// BackendDeny drops what a local pod sends, through a Service's DNAT, to one backend address,
// protocol and port.
type BackendDeny struct {
	Origin   Origin // the EgressFirewall; Rule is the index of the rule that denies
	Pod      netip.Addr
	Backend  netip.Addr
	Protocol uint8
	Port     uint16
	// Log is the severity at which its drops are ACL-logged (the namespace's
	// k8s.ovn.org/acl-logging deny level); "" does not log.
	Log string
}

// BackendDSCP sets the DSCP of what a local pod sends, through a Service's DNAT, to one backend
// address, protocol and port.
type BackendDSCP struct {
	Origin   Origin // the EgressQoS; Rule is the index of the rule that marks
	Pod      netip.Addr
	Backend  netip.Addr
	Protocol uint8
	Port     uint16
	DSCP     uint8
}
