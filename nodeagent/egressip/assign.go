// Package egressip holds the pure decisions of EgressIP: which node hosts each egress IP (the
// leader's assignment, upstream cluster-manager's algorithm) and which EgressIP object serves a
// pod that several select. No API calls, no kernel, no clock: the leader controller feeds it
// listers' objects and its health probes, then writes the statuses and records the events.
package egressip

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// Plan is the outcome of one assignment run over every EgressIP object.
type Plan struct {
	// Assignments has one entry per EgressIP object, oldest object first.
	Assignments []Assignment
	// Events are to be recorded on the EgressIP objects, in order. Like upstream, which emits
	// them at every reconcile of an object, a run repeats them while the problem lasts: the
	// caller records them when the object's assignment changed, or lets the event recorder's
	// spam filter absorb the repeats.
	Events []Event
}

// Assignment is the decision for one EgressIP object.
type Assignment struct {
	Name string
	// Items is the new status.items: the still valid entries in their previous order, then
	// the new ones in spec order.
	Items []ovnv1.EgressIPStatusItem
	// Changed says Items differ from status.items and must be written.
	Changed bool
	// Pending says more IPs wait for Items to be written: as upstream, a write that removes
	// entries only re-places the removed IPs, and other additions come in the next run.
	Pending bool
	// Unassigned are the requested IPs left without a node, and why.
	Unassigned []Unassigned
}

// Unassigned is a requested egress IP that no node hosts.
type Unassigned struct {
	IP      string
	Reason  string // one of the Reason constants
	Message string
}

// Assign places every requested egress IP on a node as upstream's cluster-manager does:
//   - a node may host egress IPs when labeled, Ready, reachable and configured (primary
//     interface known), and only IPs a network of it contains: the primary subnet, else a
//     secondary host network (a host CIDR); when some such nodes host the IP on a secondary
//     network, only they are candidates;
//   - a node hosts at most one IP of an object; the least loaded node (all objects' IPs
//     counted) is tried first, ties broken by node name;
//   - valid status entries are kept, so a new leader resumes without moves and a returning
//     node gets nothing back (no rebalancing); invalid entries are removed, and in that run
//     only the removed IPs are placed again (removals before additions);
//   - an IP equal to a node address, or held by another object (in a valid status entry, or
//     else requested by an older object), is not placed; an object with an unparsable IP is
//     left as it is.
//
// nodes must be every node of the cluster: an egress IP must not equal the address of any,
// assignable or not. Objects are decided oldest first (creation time, then name). The inputs
// are not modified.
func Assign(eips []*ovnv1.EgressIP, nodes []Node) Plan {
	a := newAllocator(nodes)
	objs := make([]*object, 0, len(eips))
	for _, e := range eips {
		objs = append(objs, newObject(e))
	}
	slices.SortFunc(objs, func(x, y *object) int {
		if c := x.eip.CreationTimestamp.Compare(y.eip.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(x.eip.Name, y.eip.Name)
	})
	// Every object's valid entries are counted before any placement, so loads and held IPs
	// are the whole cluster's.
	for _, o := range objs {
		a.validate(o)
	}
	var plan Plan
	for _, o := range objs {
		plan.Assignments = append(plan.Assignments, a.decide(o, &plan.Events))
	}
	return plan
}

// object is one EgressIP with its parsed spec and its status split by validity.
type object struct {
	eip *ovnv1.EgressIP
	// spec is the requested IPs, canonical and without repeats, in spec order.
	spec []netip.Addr
	// badIP is the first unparsable requested IP; such an object is left as it is.
	badIP          *string
	valid, invalid []ovnv1.EgressIPStatusItem
}

func newObject(e *ovnv1.EgressIP) *object {
	o := &object{eip: e}
	for _, s := range e.Spec.EgressIPs {
		ip, err := netip.ParseAddr(string(s))
		if err != nil || ip.Zone() != "" {
			bad := string(s)
			o.badIP = &bad
			return o
		}
		if ip = ip.Unmap(); !slices.Contains(o.spec, ip) {
			o.spec = append(o.spec, ip)
		}
	}
	return o
}

// holder is who holds an egress IP.
type holder struct{ eip, node string }

// allocator is the cluster's state while deciding: upstream's allocator cache, rebuilt from
// the statuses at every run.
type allocator struct {
	nodes    map[string]*Node
	ordered  []*Node         // by name
	load     map[string]int  // node -> egress IPs it hosts
	loadV4   map[string]int  // node -> IPv4 egress IPs it hosts (cloud capacities are per family)
	hosting  map[holder]bool // (object, node) pairs with an IP there
	held     map[netip.Addr]holder
	hostAddr map[netip.Addr]string // node address -> node
}

func newAllocator(nodes []Node) *allocator {
	a := &allocator{nodes: map[string]*Node{}, load: map[string]int{}, loadV4: map[string]int{}, hosting: map[holder]bool{},
		held: map[netip.Addr]holder{}, hostAddr: map[netip.Addr]string{}}
	for i := range nodes {
		n := &nodes[i]
		a.nodes[n.Name] = n
		a.ordered = append(a.ordered, n)
	}
	slices.SortFunc(a.ordered, func(x, y *Node) int { return cmp.Compare(x.Name, y.Name) })
	for _, n := range a.ordered {
		addrs := slices.Clone(n.Addresses)
		for _, c := range n.HostCIDRs {
			addrs = append(addrs, c.Addr())
		}
		for _, ip := range addrs {
			if _, ok := a.hostAddr[ip.Unmap()]; !ok {
				a.hostAddr[ip.Unmap()] = n.Name
			}
		}
	}
	return a
}

func (a *allocator) take(ip netip.Addr, eip, node string) {
	a.held[ip] = holder{eip, node}
	a.load[node]++
	if ip.Is4() {
		a.loadV4[node]++
	}
	a.hosting[holder{eip, node}] = true
}

// validate sorts an object's status entries into valid and invalid as upstream's
// validateEgressIPStatus does, and takes the valid ones. An entry is invalid when its node is
// unknown, unconfigured, unlabeled, not Ready or unreachable, when no network of the node
// contains its IP, when the IP is no longer requested or is held by an older object, or when
// the object has more than one IP on that node (then all of them are).
func (a *allocator) validate(o *object) {
	perNode := map[string]map[string]bool{}
	for _, it := range o.eip.Status.Items {
		if perNode[it.Node] == nil {
			perNode[it.Node] = map[string]bool{}
		}
		perNode[it.Node][it.EgressIP] = true
	}
	requested := map[string]bool{}
	for _, ip := range o.spec {
		requested[ip.String()] = true
	}
	for _, it := range o.eip.Status.Items {
		ip, err := netip.ParseAddr(it.EgressIP)
		n := a.nodes[it.Node]
		_, taken := a.held[ip]
		ok := err == nil && !taken && n != nil && n.assignable() && n.canHost(ip) &&
			len(perNode[it.Node]) == 1 && (o.badIP != nil || requested[it.EgressIP])
		if !ok {
			o.invalid = append(o.invalid, it)
			continue
		}
		o.valid = append(o.valid, it)
		a.take(ip, o.eip.Name, it.Node)
	}
}

// decide computes an object's new status, following upstream's reconcileEgressIP.
func (a *allocator) decide(o *object, events *[]Event) Assignment {
	name := o.eip.Name
	out := Assignment{Name: name}
	if o.badIP != nil {
		*events = append(*events, invalidIPEvent(name, *o.badIP))
		out.Items = o.eip.Status.Items
		out.Unassigned = []Unassigned{{IP: *o.badIP, Reason: ReasonInvalidEgressIP,
			Message: fmt.Sprintf("%q is not a valid IP address; the object is not processed", *o.badIP)}}
		return out
	}
	placed := map[string]bool{}
	for _, it := range o.valid {
		placed[it.EgressIP] = true
	}
	removed := map[string]bool{}
	for _, it := range o.invalid {
		removed[it.EgressIP] = true
	}
	var todo []netip.Addr
	for _, ip := range o.spec {
		switch {
		case placed[ip.String()]:
		case len(removed) == 0 || removed[ip.String()]:
			todo = append(todo, ip)
		default:
			out.Pending = true // waits for the removals to be written
		}
	}
	out.Items = slices.Clone(o.valid)
	if len(todo) > 0 {
		added, unassigned := a.place(name, todo, events)
		out.Items = append(out.Items, added...)
		out.Unassigned = unassigned
		out.Changed = len(added) > 0
	}
	out.Changed = out.Changed || len(o.invalid) > 0
	return out
}

// place finds nodes for an object's IPs, following upstream's assignEgressIPs; its events are
// upstream's, including the summary ones.
func (a *allocator) place(name string, ips []netip.Addr, events *[]Event) ([]ovnv1.EgressIPStatusItem, []Unassigned) {
	var candidates []*Node
	for _, n := range a.ordered {
		if n.assignable() {
			candidates = append(candidates, n)
		}
	}
	// Stable: equal loads keep the name order.
	slices.SortStableFunc(candidates, func(x, y *Node) int { return cmp.Compare(a.load[x.Name], a.load[y.Name]) })
	var unassigned []Unassigned
	if len(candidates) == 0 {
		*events = append(*events, noAssignableNodeEvent(name))
		for _, ip := range ips {
			unassigned = append(unassigned, Unassigned{IP: ip.String(), Reason: ReasonNoMatchingNodeFound,
				Message: "no node is labeled " + AssignableLabel + ", Ready and reachable"})
		}
		return nil, unassigned
	}
	var added []ovnv1.EgressIPStatusItem
	for _, ip := range ips {
		if node, ok := a.hostAddr[ip]; ok {
			ev := conflictEvent(name, ip.String(), node)
			*events = append(*events, ev)
			unassigned = append(unassigned, Unassigned{IP: ip.String(), Reason: ev.Reason, Message: ev.Message})
			continue
		}
		if h, ok := a.held[ip]; ok {
			ev := claimedEvent(name, ip.String(), h.eip, h.node)
			*events = append(*events, ev)
			unassigned = append(unassigned, Unassigned{IP: ip.String(), Reason: ev.Reason, Message: ev.Message})
			continue
		}
		node, busy, full := a.pick(name, ip, candidates)
		if node == nil {
			msg := "no assignable node has a network that contains it"
			switch {
			case busy:
				msg = "every assignable node that can host it already hosts another IP of this EgressIP"
			case full:
				msg = "every assignable node that can host it is at its cloud capacity"
			}
			unassigned = append(unassigned, Unassigned{IP: ip.String(), Reason: ReasonNoMatchingNodeFound, Message: msg})
			continue
		}
		a.take(ip, name, node.Name)
		added = append(added, ovnv1.EgressIPStatusItem{Node: node.Name, EgressIP: ip.String()})
	}
	switch {
	case len(added) == 0:
		strs := make([]string, len(ips))
		for i, ip := range ips {
			strs[i] = ip.String()
		}
		*events = append(*events, noHostingNodeEvent(name, strs))
	case len(added) < len(ips):
		*events = append(*events, partlyAssignedEvent(name))
	}
	return added, unassigned
}

// pick is the first candidate that can host ip, has no other IP of the object and, in cloud
// mode, has capacity left. When some candidates host ip on a secondary network (not their
// primary one; bare metal only), only they are tried, as upstream. busy reports that a node
// could host ip but already has an IP of the object, full that one is at its capacity.
func (a *allocator) pick(name string, ip netip.Addr, candidates []*Node) (node *Node, busy, full bool) {
	var secondary []*Node
	for _, n := range candidates {
		if _, ok := n.secondaryNetwork(ip); ok && n.Cloud == nil && !n.inPrimary(ip) {
			secondary = append(secondary, n)
		}
	}
	if len(secondary) > 0 {
		candidates = secondary
	}
	for _, n := range candidates {
		if !n.canHost(ip) {
			continue
		}
		if a.hosting[holder{name, n.Name}] {
			busy = true
			continue
		}
		if n.Cloud != nil && !n.Cloud.fits(ip, a.loadV4[n.Name], a.load[n.Name]-a.loadV4[n.Name]) {
			full = true
			continue
		}
		return n, false, false
	}
	return nil, busy, full
}
