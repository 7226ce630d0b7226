package egressrouter

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// candidate is a node as placement sees it.
type candidate struct {
	Name string
	// Ready is the Node's Ready condition; Reachable, the leader's health probes of its agent.
	Ready, Reachable bool
	// HostCIDRs are the node's addresses with their prefix lengths (k8s.ovn.org/host-cidrs).
	HostCIDRs []netip.Prefix
}

// routerPod is an existing router pod of the EgressRouter.
type routerPod struct {
	Name, Node string
	// specHash is the spec the pod was made for.
	specHash string
	// unready: the leader has seen the pod running and not ready for unreadyAfter (reported);
	// stuck: for unreadyAfter more, its node Ready and reachable (replaced).
	unready, stuck bool
}

// Reasons of the leader's decisions (the conditions' reasons).
const (
	reasonCreated         = "RouterPodCreated"
	reasonNodeUnavailable = "NodeUnavailable"
	reasonSpecChanged     = "SpecChanged"
	reasonNoNode          = "NoNodeForNetwork"
	reasonInvalidSpec     = "InvalidSpec"
	// reasonPodRefused: the API server refused the router pod (quota, pod security, policy).
	reasonPodRefused = "RouterPodRefused"
)

// decision is what the leader does for one EgressRouter.
type decision struct {
	// Keep is the pod that stays ("" none).
	Keep string
	// Delete are pods to delete: on unusable nodes, for an older spec, or extra.
	Delete []string
	// Create is the node to create the router pod on ("" none).
	Create string
	// Reason and Message explain a Create or why there is no router (empty when Keep).
	Reason, Message string
}

// decide decides where the router runs. The network is the first address: a node is eligible
// when it is Ready, its agent answers, and one of its host CIDRs contains that address (the node
// has a NIC on the router's network: upstream's inference when macvlan.master is not set). With
// macvlan.master set and no node holding an address on that network (a NIC may carry none),
// every Ready, reachable node is eligible and the master's presence is checked on the node.
// A kept pod stays where it is (no move back when a better node returns); a new one goes to
// the eligible node with the fewest routers (load), then by name. Nodes in avoid (where this
// spec's configuration failed: a node without the master NIC, say, or where its pod stayed
// unready) are not eligible, unless no other is: then a pod there stays, and its node keeps
// trying. A stuck pod (its router gone, or never configured because the node's chain lacked
// egressd-cni) moves to another node as a failed configuration does, and likewise stays when
// no other node is left.
func decide(first netip.Prefix, master, hash string, compileErr error, nodes []candidate, pods []routerPod, load map[string]int, avoid []string) decision {
	var p decision
	if compileErr != nil {
		for _, pod := range pods {
			p.Delete = append(p.Delete, pod.Name)
		}
		p.Reason, p.Message = reasonInvalidSpec, compileErr.Error()
		return p
	}
	eligible := eligible(first, master, nodes)
	if others := slices.DeleteFunc(slices.Clone(eligible), func(n string) bool { return slices.Contains(avoid, n) }); len(others) > 0 {
		eligible = others
	}
	var unusable, stale, failed, stuck []string
	for _, pod := range pods {
		switch {
		case pod.stuck && pod.specHash == hash && !slices.Contains(eligible, pod.Node): // its node is in avoid (Controller.avoiding), another is not
			stuck = append(stuck, pod.Name+" on node "+pod.Node)
			p.Delete = append(p.Delete, pod.Name)
		case !slices.Contains(eligible, pod.Node) && slices.Contains(avoid, pod.Node):
			failed = append(failed, pod.Node)
			p.Delete = append(p.Delete, pod.Name)
		case !slices.Contains(eligible, pod.Node):
			unusable = append(unusable, pod.Node)
			p.Delete = append(p.Delete, pod.Name)
		case pod.specHash != hash:
			stale = append(stale, pod.Name)
			p.Delete = append(p.Delete, pod.Name)
		case p.Keep == "":
			p.Keep = pod.Name
		default:
			p.Delete = append(p.Delete, pod.Name)
		}
	}
	if p.Keep != "" {
		return p
	}
	if len(eligible) == 0 {
		p.Reason = reasonNoNode
		p.Message = fmt.Sprintf("no Ready node whose agent answers has an address in %s (a NIC on the router's network)", first.Masked())
		if master != "" {
			p.Message = "no Ready node whose agent answers"
		}
		return p
	}
	p.Create = slices.MinFunc(eligible, func(a, b string) int {
		if load[a] != load[b] {
			return load[a] - load[b]
		}
		return strings.Compare(a, b)
	})
	switch {
	case len(stuck) > 0:
		p.Reason = reasonUnready
		p.Message = fmt.Sprintf("router pod %s was not ready for %.0fs (its router is not there): router pod recreated on node %s", strings.Join(stuck, ", "), (2 * unreadyAfter).Seconds(), p.Create)
	case len(failed) > 0:
		p.Reason = reasonConfigFailed
		p.Message = fmt.Sprintf("the router could not be configured on node %s: router pod recreated on node %s", strings.Join(failed, ", "), p.Create)
	case len(unusable) > 0:
		p.Reason = reasonNodeUnavailable
		p.Message = fmt.Sprintf("node %s is not Ready, does not answer or left the router's network: router pod recreated on node %s", strings.Join(unusable, ", "), p.Create)
	case len(stale) > 0:
		p.Reason = reasonSpecChanged
		p.Message = fmt.Sprintf("spec changed: router pod recreated on node %s", p.Create)
	default:
		p.Reason = reasonCreated
		p.Message = fmt.Sprintf("router pod created on node %s", p.Create)
	}
	return p
}

// eligible are the nodes a router on first's network may run on (see decide), by name.
func eligible(first netip.Prefix, master string, nodes []candidate) []string {
	var up, onNetwork []string
	for _, n := range nodes {
		if !n.Ready || !n.Reachable {
			continue
		}
		up = append(up, n.Name)
		if slices.ContainsFunc(n.HostCIDRs, func(c netip.Prefix) bool { return c.Masked().Contains(first.Addr()) }) {
			onNetwork = append(onNetwork, n.Name)
		}
	}
	if len(onNetwork) == 0 && master != "" && !anyOnNetwork(first, nodes) {
		return up
	}
	return onNetwork
}

// anyOnNetwork reports whether any node, usable or not, has an address on first's network: then
// the network is known to be where those nodes are, and master does not widen the choice.
func anyOnNetwork(first netip.Prefix, nodes []candidate) bool {
	return slices.ContainsFunc(nodes, func(n candidate) bool {
		return slices.ContainsFunc(n.HostCIDRs, func(c netip.Prefix) bool { return c.Masked().Contains(first.Addr()) })
	})
}
