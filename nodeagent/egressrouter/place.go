package egressrouter

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// candidate is a node as placement sees it.
type candidate struct {
	Name string
	// Ready is the Node's Ready condition; Reachable, the leader's health probes of its agent.
	Ready, Reachable bool
	// Unschedulable is the Node's spec.unschedulable (kubectl cordon; drain cordons first).
	Unschedulable bool
	// Taints are the Node's spec.taints.
	Taints []corev1.Taint
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
	// reasonNoSchedulableNode: eligible nodes are usable, but none takes a new router pod: each
	// is cordoned or has a taint the router pod does not tolerate.
	reasonNoSchedulableNode = "NoSchedulableNode"
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
// has a NIC on the router's network). When no node holds an address on that network, every
// Ready, reachable node is eligible: the macvlan goes on macvlan.master, or without it on the
// node's default-route interface, as upstream places it (the network being reachable on that
// NIC's L2 without a node address); the node checks the NIC is there.
// A kept pod stays where it is (no move back when a better node returns); a new one goes to
// the eligible node with the fewest taints it does not tolerate of effect PreferNoSchedule,
// then the fewest routers (load), then by name. Nodes in avoid (where this spec's configuration
// failed: a node without the master NIC, say, or where its pod stayed unready) are not
// eligible, unless no other is: then a pod there stays, and its node keeps trying. A stuck pod
// (its router gone, or never configured because the node's chain lacked egressd-cni) moves to
// another node as a failed configuration does, and likewise stays when no other node is left.
//
// The pod is bound by nodeName, so no scheduler checks cordons and taints: decide does, against
// the router pod's tolerations (newPod's), as the scheduler and the taint manager would:
//   - A cordoned node (spec.unschedulable) takes no new router pod, but a router pod already
//     there stays: cordon means "no new pods", and moving a working router would interrupt its
//     traffic for nothing. Once that pod is gone (kubectl drain evicts it; or someone deletes
//     it), its replacement goes to another node, never back to the cordoned one. Unlike the
//     scheduler, decide does not let a toleration of node.kubernetes.io/unschedulable through
//     (a router pod created on a cordoned node would bypass the cordon: the controller sets
//     its nodeName); that taint, mirroring the cordon, is said once, as "cordoned".
//   - A taint of effect NoSchedule the pod does not tolerate: no new pod; one there stays.
//   - NoExecute not tolerated: no new pod, and one there moves (the taint manager would evict
//     it; the kubelet refuses such a pod too).
//   - PreferNoSchedule not tolerated: a new pod goes elsewhere when another node is eligible.
//
// When eligible nodes exist but all are excluded so, the reason is NoSchedulableNode, and its
// message names each node and why ("node-2: cordoned; node-3: taint dedicated=infra:NoSchedule
// not tolerated").
func decide(first netip.Prefix, master, hash string, compileErr error, nodes []candidate, tolerations []corev1.Toleration, pods []routerPod, load map[string]int, avoid []string) decision {
	var p decision
	if compileErr != nil {
		for _, pod := range pods {
			p.Delete = append(p.Delete, pod.Name)
		}
		p.Reason, p.Message = reasonInvalidSpec, compileErr.Error()
		return p
	}
	usable := eligible(first, nodes)
	// unknown: no node tells where the network is, so any node may host the router.
	unknown := !anyOnNetwork(first, nodes)
	fits := map[string]fit{}
	for _, n := range nodes {
		fits[n.Name] = fitOf(n, tolerations)
	}
	// keep: where a router pod may stay; place: where a new one may go.
	keep := slices.DeleteFunc(slices.Clone(usable), func(n string) bool { return fits[n].evict })
	place := slices.DeleteFunc(slices.Clone(keep), func(n string) bool { return fits[n].refuse })
	if others := slices.DeleteFunc(slices.Clone(place), func(n string) bool { return slices.Contains(avoid, n) }); len(others) > 0 {
		place = others
		keep = slices.DeleteFunc(keep, func(n string) bool { return slices.Contains(avoid, n) })
	}
	var unusable, evicted, stale, failed, stuck []string
	for _, pod := range pods {
		switch {
		case fits[pod.Node].evict && slices.Contains(usable, pod.Node):
			evicted = append(evicted, pod.Node+" ("+fits[pod.Node].why+")")
			p.Delete = append(p.Delete, pod.Name)
		case pod.stuck && pod.specHash == hash && !slices.Contains(keep, pod.Node): // its node is in avoid (Controller.avoiding), another is not
			stuck = append(stuck, pod.Name+" on node "+pod.Node)
			p.Delete = append(p.Delete, pod.Name)
		case !slices.Contains(keep, pod.Node) && slices.Contains(avoid, pod.Node):
			failed = append(failed, pod.Node)
			p.Delete = append(p.Delete, pod.Name)
		case !slices.Contains(keep, pod.Node):
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
	if len(usable) == 0 {
		p.Reason = reasonNoNode
		p.Message = fmt.Sprintf("no Ready node whose agent answers has an address in %s (a NIC on the router's network)", first.Masked())
		if unknown {
			p.Message = "no Ready node whose agent answers"
		}
		return p
	}
	if len(place) == 0 { // avoid empties no list: every usable node is cordoned or tainted
		var excluded []string
		for _, n := range usable {
			excluded = append(excluded, n+": "+fits[n].why)
		}
		p.Reason = reasonNoSchedulableNode
		p.Message = fmt.Sprintf("no Ready node whose agent answers and has an address in %s takes a new router pod: %s", first.Masked(), strings.Join(excluded, "; "))
		if unknown {
			p.Message = "no Ready node whose agent answers takes a new router pod: " + strings.Join(excluded, "; ")
		}
		return p
	}
	p.Create = slices.MinFunc(place, func(a, b string) int {
		if fits[a].prefer != fits[b].prefer {
			return fits[a].prefer - fits[b].prefer
		}
		if load[a] != load[b] {
			return load[a] - load[b]
		}
		return strings.Compare(a, b)
	})
	switch {
	case len(evicted) > 0:
		p.Reason = reasonNodeUnavailable
		p.Message = fmt.Sprintf("node %s evicts the router pod: router pod recreated on node %s", strings.Join(evicted, ", "), p.Create)
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
	if unknown && master == "" { // without this, an admin wonders how a node off the network serves it
		p.Message += fmt.Sprintf("; no node has an address in %s: the macvlan sits on its default-route interface, as upstream", first.Masked())
	}
	return p
}

// fit is what a node's cordon and taints allow a router pod (see decide).
type fit struct {
	// refuse: no new router pod (cordoned, or a NoSchedule or NoExecute taint not tolerated);
	// evict: a router pod there goes too (a NoExecute taint not tolerated).
	refuse, evict bool
	// prefer is the number of PreferNoSchedule taints not tolerated (fewer is better).
	prefer int
	// why explains refuse: "cordoned, taint dedicated=infra:NoSchedule not tolerated".
	why string
}

func fitOf(n candidate, tolerations []corev1.Toleration) fit {
	var f fit
	var why []string
	if n.Unschedulable {
		f.refuse = true
		why = append(why, "cordoned")
	}
	for i := range n.Taints {
		t := &n.Taints[i]
		if n.Unschedulable && t.Key == corev1.TaintNodeUnschedulable {
			continue // the cordon, said already
		}
		// Comparison operators (Lt, Gt: a feature gate's) are off: the router pod uses none.
		if slices.ContainsFunc(tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), t, false) }) {
			continue
		}
		switch t.Effect {
		case corev1.TaintEffectNoExecute:
			f.evict = true
			fallthrough
		case corev1.TaintEffectNoSchedule:
			f.refuse = true
			why = append(why, "taint "+t.ToString()+" not tolerated")
		case corev1.TaintEffectPreferNoSchedule:
			f.prefer++
		}
	}
	f.why = strings.Join(why, ", ")
	return f
}

// eligible are the nodes a router on first's network may run on (see decide), by name.
func eligible(first netip.Prefix, nodes []candidate) []string {
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
	if len(onNetwork) == 0 && !anyOnNetwork(first, nodes) {
		return up
	}
	return onNetwork
}

// anyOnNetwork reports whether any node, usable or not, has an address on first's network: then
// the network is known to be where those nodes are, and the choice is not widened to others.
func anyOnNetwork(first netip.Prefix, nodes []candidate) bool {
	return slices.ContainsFunc(nodes, func(n candidate) bool {
		return slices.ContainsFunc(n.HostCIDRs, func(c netip.Prefix) bool { return c.Masked().Contains(first.Addr()) })
	})
}
