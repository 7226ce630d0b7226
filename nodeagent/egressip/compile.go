package egressip

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// Part is what EgressIP adds to this node's state.
type Part struct {
	// Addresses are the egress IPs assigned to this node.
	Addresses []dataplane.Address
	// SNAT rewrites the source of pods (of any node) served by an object with an IP on this
	// node to that IP, for destinations outside Exempt.
	SNAT []dataplane.SNAT
	// Steer sends local pods' traffic to the egress nodes of their object.
	Steer []cluster.Steer
	// Secondary are this node's egress IPs on a secondary host network (outside its primary
	// interface's): what is SNATed to one must leave through the interface that holds it, by
	// that interface's routes, as upstream's per-interface tables (bare metal only: in cloud
	// mode every egress IP is on the primary interface).
	Secondary []netip.Addr
	// Guarded are every served pod's addresses, of the families its object has egress IPs of:
	// their packets must never leave a node with that source to a destination outside Exempt.
	Guarded []netip.Addr
	// Exempt are the destinations EgressIP never applies to: the cluster networks and every
	// node address (upstream: pod to node traffic keeps its node IP source).
	Exempt []netip.Prefix
	// RemotePods are the other nodes' pod networks (spec.podCIDRs): where the pods are whose
	// packets may arrive steered here; RemotePodsOf the same by node name.
	RemotePods   []netip.Prefix
	RemotePodsOf map[string][]netip.Prefix
	// Assigned says some EgressIP has an egress node: other nodes may steer their pods' packets
	// here, also for a moment after this node stopped serving them (and stopped reading them).
	Assigned bool
	// Events are upstream's UndefinedRequest warnings for local pods several objects select.
	Events []Event
	// Primaries are every node's primary interface addresses, by node name (this node's
	// included): steering reaches an egress node directly or through the tunnel by them.
	Primaries map[string]cluster.PrimaryIfAddr
	// Cloud says some node carries the cloud's egress-ipconfig annotation: the nodes are VMs
	// whose fabric checks source addresses even on one subnet.
	Cloud bool
}

// Compiler compiles EgressIPs into this node's part, remembering which object serves each pod
// so that the first claim holds across syncs.
type Compiler struct {
	decided    decided
	namespaces watchers.Memo[*pickedNamespaces]
	nodes      watchers.Memo[nodeNetworks]
	// networks and node are what nodes was computed with besides the Nodes.
	networks []netip.Prefix
	node     string
}

// nodeNetworks is what the compile reads of every Node: with 5,000 nodes, a few milliseconds
// the Compiler keeps while Nodes (and the cluster networks) stay. Its slices are clipped: a
// part that appends to them copies them.
type nodeNetworks struct {
	primaries    map[string]cluster.PrimaryIfAddr
	exempt       []netip.Prefix // sorted, without duplicates
	remotePodsOf map[string][]netip.Prefix
	remotePods   []netip.Prefix // sorted
	cloud        bool
}

// nodeReads are the kinds of objects nodeNetworks is read from.
var nodeReads = []any{&corev1.Node{}}

func readNodeNetworks(in *cluster.Input) (nodeNetworks, error) {
	nodes, err := in.Snap.Nodes.List(labels.Everything())
	if err != nil {
		return nodeNetworks{}, err
	}
	var n nodeNetworks
	n.primaries, n.exempt = cluster.NodeNetworks(in, nodes)
	n.remotePodsOf = remotePodNetworks(in.Node, nodes)
	for _, ps := range n.remotePodsOf {
		n.remotePods = append(n.remotePods, ps...)
	}
	n.cloud = slices.ContainsFunc(nodes, func(n *corev1.Node) bool {
		_, ok := n.Annotations[CloudConfigAnnotation]
		return ok
	})
	// Listers return objects in no particular order: sort, so equal inputs give equal states.
	slices.SortFunc(n.exempt, netip.Prefix.Compare)
	n.exempt = slices.Clip(slices.Compact(n.exempt))
	slices.SortFunc(n.remotePods, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	n.remotePods = slices.Clip(n.remotePods)
	return n, nil
}

// selectedNamespaces are the namespaces each EgressIP selects, by its name.
func selectedNamespaces(snap *watchers.Snapshot, eips []*ovnv1.EgressIP, picked *pickedNamespaces) (map[string][]*corev1.Namespace, error) {
	byEIP := map[string][]*corev1.Namespace{}
	for _, e := range eips {
		nsSel, err := metav1.LabelSelectorAsSelector(&e.Spec.NamespaceSelector)
		if err != nil {
			continue // an invalid selector selects nothing
		}
		if byEIP[e.Name], err = picked.pick(snap, nsSel); err != nil {
			return nil, err
		}
	}
	return byEIP, nil
}

// egressNode is one status item with the node's primary address of the IP's family.
type egressNode struct {
	node string
	ip   netip.Addr
	via  netip.Addr
}

// Compile computes this node's part from the EgressIPs' status (the leader's assignment).
// While only pods changed, and the pods' journal names them, it decides for those alone.
func (c *Compiler) Compile(in *cluster.Input) (Part, error) {
	// Both before the caches are read: a change landing after is seen by the next compile.
	keys, journaled := c.decided.pods.Changed(in.Snap.Generations, &corev1.Pod{})
	others, known := in.Snap.Generations.Of(decisionReads...)
	if !slices.Equal(c.networks, in.Networks) || c.node != in.Node {
		c.nodes.Forget()
		c.decided.valid = false
		c.networks, c.node = slices.Clone(in.Networks), in.Node
	}
	if c.decided.valid && journaled && others == c.decided.others {
		part, err := c.decided.decideAgain(in, keys)
		c.decided.valid = err == nil
		return part, err
	}
	part, err := c.compileAll(in)
	c.decided.valid, c.decided.others = err == nil && known, others
	return part, err
}

// compileAll computes the part from every object, and decides for every selected pod.
func (c *Compiler) compileAll(in *cluster.Input) (Part, error) {
	var part Part
	eips, err := in.Snap.EgressIPs.List(labels.Everything())
	if err != nil {
		return part, err
	}
	nodes, err := c.nodes.Get(in.Snap.Generations, nodeReads, func() (nodeNetworks, error) { return readNodeNetworks(in) })
	if err != nil {
		return part, err
	}
	part.Primaries, part.Exempt, part.RemotePodsOf, part.RemotePods, part.Cloud = nodes.primaries, nodes.exempt, nodes.remotePodsOf, nodes.remotePods, nodes.cloud
	primary := part.Primaries
	egress := map[string][]egressNode{}
	for _, e := range eips {
		requested := map[netip.Addr]bool{}
		for _, a := range e.Spec.EgressIPs {
			if ip, err := netip.ParseAddr(string(a)); err == nil {
				requested[ip] = true
			}
		}
		for _, it := range e.Status.Items {
			ip, err := netip.ParseAddr(it.EgressIP)
			// An address the spec does not request (any longer) is not served: the leader
			// takes it out of the status next, and a status written by anyone else than the
			// leader cannot add one.
			if err != nil || !requested[ip] {
				continue
			}
			via := primary[it.Node].V4.Addr()
			if ip.Is6() {
				via = primary[it.Node].V6.Addr()
			}
			egress[e.Name] = append(egress[e.Name], egressNode{node: it.Node, ip: ip, via: via})
			if it.Node == in.Node {
				part.Addresses = append(part.Addresses, dataplane.Address{Origin: origin(e.Name), Addr: ip})
				if self, ok := primary[in.Node]; ok && !part.Cloud && !self.Contains(ip) {
					part.Secondary = append(part.Secondary, ip)
				}
			}
		}
	}
	part.Assigned = len(egress) > 0
	namespaces, err := selectedNamespaces(in.Snap, eips, c.picked(in.Snap))
	if err != nil {
		return part, err
	}
	candidates, err := selectedPods(in, eips, namespaces)
	if err != nil {
		return part, err
	}
	// Listers return objects in no particular order: sort, so equal inputs give equal states.
	slices.SortFunc(part.Addresses, func(a, b dataplane.Address) int { return a.Addr.Compare(b.Addr) })
	slices.SortFunc(part.Secondary, netip.Addr.Compare)
	d := &c.decided
	previous := d.of
	d.of, d.evented = make(map[string]*podDecision, len(candidates)), map[string]bool{}
	d.selections, d.egress, d.secondary = selections(eips, namespaces), egress, part.Secondary
	for _, cp := range candidates {
		var current string // the first claim holds
		if p := previous[cp.key]; p != nil {
			current = p.eip
		}
		d.set(cp.key, d.decide(in, cp.pod, cp.eips, current))
	}
	d.assemble(&part)
	return part, nil
}

// addPod adds what serving pod by object eip, from nodes, takes on this node to pd.
func (d *decided) addPod(pd *podDecision, in *cluster.Input, pod *watchers.Pod, eip string, nodes []egressNode) {
	local := pod.Spec.NodeName == in.Node
	for _, pip := range pod.Status.PodIPs {
		addr, err := netip.ParseAddr(pip.IP)
		if err != nil {
			continue
		}
		var here netip.Addr
		var via []netip.Addr
		for _, n := range nodes {
			if n.ip.Is4() != addr.Is4() {
				continue
			}
			if n.node == in.Node {
				here = n.ip
			} else if n.via.IsValid() {
				via = append(via, n.via)
			}
		}
		if !here.IsValid() && len(via) == 0 {
			continue // no egress IP of this family: the normal path, as upstream
		}
		pd.guarded = append(pd.guarded, addr)
		if here.IsValid() {
			pd.snat = append(pd.snat, dataplane.SNAT{Origin: origin(eip), Pod: addr, To: here})
			// This node is an egress node of the object: its own pods leave here, and through the
			// other egress nodes too, flow by flow, as upstream spreads them (not from an egress
			// IP on a secondary network, whose pods leave through its interface).
			if local && len(via) > 0 && !slices.Contains(d.secondary, here) {
				slices.SortFunc(via, netip.Addr.Compare)
				pd.steer = append(pd.steer, cluster.Steer{Origin: origin(eip), PodIP: addr, Via: via, Spread: uint8(min(1+len(via), 255)),
					Pod: dataplane.Origin{Kind: cluster.KindPod, Namespace: pod.Namespace, Name: pod.Name}})
			}
			continue
		}
		if local {
			slices.SortFunc(via, netip.Addr.Compare)
			pd.steer = append(pd.steer, cluster.Steer{Origin: origin(eip), PodIP: addr, Via: via,
				Pod: dataplane.Origin{Kind: cluster.KindPod, Namespace: pod.Namespace, Name: pod.Name}})
		}
	}
}

// remotePodNetworks are the spec.podCIDRs of every node but this one. (A CNI with its own IPAM
// gives Nodes none: then steered packets of pods this node does not know yet are not
// recognised, and leave as the CNI treats them.)
func remotePodNetworks(self string, nodes []*corev1.Node) map[string][]netip.Prefix {
	out := map[string][]netip.Prefix{}
	for _, n := range nodes {
		if n.Name == self {
			continue
		}
		for _, c := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				out[n.Name] = append(out[n.Name], p.Masked())
			}
		}
	}
	return out
}

func origin(name string) dataplane.Origin {
	return dataplane.Origin{Kind: cluster.KindEgressIP, Name: name}
}

// candidate is a pod and the objects that select it.
type candidate struct {
	key  string
	pod  *watchers.Pod
	eips []*ovnv1.EgressIP
}

// selectedPods finds every pod of the cluster some assigned EgressIP selects, in the namespaces
// each selects.
func selectedPods(in *cluster.Input, eips []*ovnv1.EgressIP, namespaces map[string][]*corev1.Namespace) ([]*candidate, error) {
	byKey := map[string]*candidate{}
	var out []*candidate
	for _, e := range eips {
		podSel, ok := podSelector(e)
		if !ok {
			continue
		}
		for _, ns := range namespaces[e.Name] {
			pods, err := in.Snap.Pods.Pods(ns.Name).List(podSel)
			if err != nil {
				return nil, err
			}
			for _, p := range pods {
				key := p.Namespace + "/" + p.Name
				cp := byKey[key]
				if cp == nil {
					cp = &candidate{key: key, pod: p}
					byKey[key] = cp
					out = append(out, cp)
				}
				cp.eips = append(cp.eips, e)
			}
		}
	}
	return out, nil
}

// podSelector is the pod selector of e, if e is assigned and its selector valid (an invalid
// one selects nothing).
func podSelector(e *ovnv1.EgressIP) (labels.Selector, bool) {
	if len(e.Status.Items) == 0 {
		return nil, false
	}
	sel, err := metav1.LabelSelectorAsSelector(&e.Spec.PodSelector)
	return sel, err == nil
}
