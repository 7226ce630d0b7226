// Package externalroute compiles AdminPolicyBasedExternalRoutes (and, optionally, upstream's
// legacy external-gateway annotations) into this node's routes: the local pods of the targeted
// namespaces leave through the policy's gateways of their address family (ECMP, BFD-gated).
package externalroute

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// Part is what AdminPolicyBasedExternalRoute adds to this node's state.
type Part struct {
	Routes   []Route  // one per (local target pod address) with the gateways of its family
	Policies []Policy // every policy, compiled, for status
	// Warnings are what upstream only logs or records as pod events: skipped gateway pods,
	// unusable legacy annotations. The caller may log them.
	Warnings []string
}

// Route sends one local pod address through gateways.
type Route struct {
	Origin   dataplane.Origin // the policy (Kind cluster.KindExternalRoute, Name); legacy only: Namespace, no Name
	Pod      dataplane.Origin // the local pod (cluster.KindPod)
	PodIP    netip.Addr
	Gateways []Gateway // same family as PodIP, sorted, deduplicated
}

// Gateway is one next hop; BFD gates it on a live session.
type Gateway struct {
	IP  netip.Addr
	BFD bool
}

// Policy is one policy's outcome on this node.
type Policy struct {
	Origin   dataplane.Origin
	Gateways []netip.Addr // every configured gateway IP (static + dynamic), sorted: the status message lists them
	Err      error        // any error fails the policy (status Fail), as upstream
}

// Compiler compiles the policies, remembering across syncs what upstream's controller
// remembers: which namespaces each policy holds (a namespace belongs to the policy that
// claimed it first) and what a policy last programmed (a failed policy keeps it).
type Compiler struct {
	// Legacy also honours upstream's removed namespace and pod annotations
	// (k8s.ovn.org/routing-external-gws, routing-namespaces, routing-network, bfd-enabled).
	Legacy bool

	held map[string]held // policy name -> its last successful build
	// namespaces are the Namespaces in name order, kept while none changed (a thousand of them
	// listed and sorted at every sync otherwise).
	namespaces struct {
		generation uint64
		valid      bool
		list       []*corev1.Namespace
	}
}

// sortedNamespaces is sortedNamespaces, kept while no Namespace changed.
func (c *Compiler) sortedNamespaces(snap *watchers.Snapshot) ([]*corev1.Namespace, error) {
	// Read before the cache: a change landing in between moves it (see Generations.Of).
	gen, known := snap.Generations.Of(&corev1.Namespace{})
	if known && c.namespaces.valid && c.namespaces.generation == gen {
		return c.namespaces.list, nil
	}
	list, err := sortedNamespaces(snap)
	c.namespaces.generation, c.namespaces.valid, c.namespaces.list = gen, known && err == nil, list
	return list, err
}

// held is what a policy keeps while it fails: upstream updates a policy's referenced
// namespaces only when its build succeeds, and leaves its programmed routes untouched when
// the build or the apply fails.
type held struct {
	namespaces []string
	routes     []Route
}

// Compile computes this node's part. Policies are taken in creation order (then name): on a
// first claim of a namespace the oldest policy wins, which is the order upstream processes
// them in a running cluster; a namespace already held keeps its holder.
func (c *Compiler) Compile(in *cluster.Input) (Part, error) {
	var part Part
	policies, err := in.Snap.ExternalRoutes.List(labels.Everything())
	if err != nil {
		return part, err
	}
	namespaces, err := c.sortedNamespaces(in.Snap)
	if err != nil {
		return part, err
	}
	slices.SortFunc(policies, func(a, b *ovnv1.AdminPolicyBasedExternalRoute) int {
		if t := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); t != 0 {
			return t
		}
		return strings.Compare(a.Name, b.Name)
	})
	refs := map[string][]string{}
	for _, p := range policies {
		if h, ok := c.held[p.Name]; ok {
			refs[p.Name] = h.namespaces
		}
	}
	next := map[string]held{}
	for _, p := range policies {
		if p.DeletionTimestamp != nil {
			continue // upstream handles a policy being deleted as deleted
		}
		o := dataplane.Origin{Kind: cluster.KindExternalRoute, Name: p.Name}
		h, warnings, targets, err := compilePolicy(in, namespaces, p, refs)
		part.Warnings = append(part.Warnings, warnings...)
		pol := Policy{Origin: o, Gateways: h.addresses(), Err: err}
		var routes []Route
		if err == nil {
			refs[p.Name] = targets
			routes, pol.Err = podRoutes(in.Pods, o, targets, h)
		}
		kept := held{namespaces: refs[p.Name], routes: routes}
		if pol.Err != nil {
			kept.routes = stillLocal(c.held[p.Name].routes, in.Pods)
		}
		if kept.namespaces != nil || kept.routes != nil {
			next[p.Name] = kept
		}
		part.Routes = append(part.Routes, kept.routes...)
		part.Policies = append(part.Policies, pol)
	}
	c.held = next
	part.Routes = dedupByPodIP(part.Routes)
	if c.Legacy {
		var warnings []string
		part.Routes, warnings = addLegacy(in, namespaces, part.Routes)
		part.Warnings = append(part.Warnings, warnings...)
	}
	slices.SortFunc(part.Routes, func(a, b Route) int { return a.PodIP.Compare(b.PodIP) })
	if len(part.Routes) == 0 {
		part.Routes = nil // equal inputs, equal (DeepEqual) parts
	}
	return part, nil
}

// compilePolicy builds a policy as upstream's getPolicyConfigAndUpdatePolicyRefs does: static
// hops, dynamic hops, target namespaces, then the one-policy-per-namespace check against the
// namespaces other policies hold.
func compilePolicy(in *cluster.Input, namespaces []*corev1.Namespace, p *ovnv1.AdminPolicyBasedExternalRoute, refs map[string][]string) (hops, []string, []string, error) {
	h, warnings, err := buildHops(in.Snap, namespaces, p)
	if err != nil {
		return h, warnings, nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.From.NamespaceSelector)
	if err != nil {
		return h, warnings, nil, fmt.Errorf("failed to build updated policy: failed to list target namespaces: %w", err)
	}
	targets := []string{}
	for _, ns := range namespaces {
		if sel.Matches(labels.Set(ns.Labels)) {
			targets = append(targets, ns.Name)
		}
	}
	others := make([]string, 0, len(refs))
	for name := range refs {
		others = append(others, name)
	}
	slices.Sort(others)
	for _, other := range others {
		if other == p.Name {
			continue
		}
		var both []string
		for _, ns := range targets {
			if slices.Contains(refs[other], ns) {
				both = append(both, ns)
			}
		}
		if len(both) > 0 {
			return h, warnings, nil, fmt.Errorf("failed to build updated policy: failed to update policy %s: namespaces %v are already affected by another policy: %s",
				p.Name, both, other)
		}
	}
	return h, warnings, targets, nil
}

// podRoutes routes every address of the local pods of targets through the gateways of its
// family. As upstream, a group of hops (static, dynamic) that gives a pod no route at all is
// an error of the policy; an address without a gateway of its family is only skipped.
func podRoutes(pods []dataplane.Pod, o dataplane.Origin, targets []string, h hops) ([]Route, error) {
	var routes []Route
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b dataplane.Pod) int { return compareOrigin(a.Origin, b.Origin) })
	for _, pod := range pods { // in name order: the first failing pod names the error
		if !slices.Contains(targets, pod.Origin.Namespace) {
			continue
		}
		for _, group := range [][]Gateway{h.static, h.dynamic} {
			if len(group) > 0 && !slices.ContainsFunc(pod.IPs, func(a netip.Addr) bool { return len(ofFamily(group, a)) > 0 }) {
				return nil, noRouteError(pod)
			}
		}
		for _, ip := range pod.IPs {
			// Static first: upstream programs the static group first and does not
			// reprogram a route that exists, so a static hop's BFD setting wins.
			gws := mergeGateways(ofFamily(h.static, ip), ofFamily(h.dynamic, ip))
			if len(gws) > 0 {
				routes = append(routes, Route{Origin: o, Pod: pod.Origin, PodIP: ip, Gateways: gws})
			}
		}
	}
	return routes, nil
}

// noRouteError is upstream's, which prints the pod's addresses where it says gateway addresses.
func noRouteError(pod dataplane.Pod) error {
	addrs := make([]string, len(pod.IPs))
	for i, a := range pod.IPs {
		addrs[i] = netip.PrefixFrom(a, a.BitLen()).String()
	}
	return fmt.Errorf("gateway specified for namespace %s with gateway addresses [%s] but no valid routes exist for pod: %s",
		pod.Origin.Namespace, strings.Join(addrs, " "), pod.Origin.Name)
}

func ofFamily(gws []Gateway, a netip.Addr) []Gateway {
	var out []Gateway
	for _, g := range gws {
		if g.IP.Is4() == a.Is4() {
			out = append(out, g)
		}
	}
	return out
}

// mergeGateways adds to first the gateways of more it lacks, sorted.
func mergeGateways(first, more []Gateway) []Gateway {
	out := slices.Clone(first)
	for _, g := range more {
		if !slices.ContainsFunc(out, func(x Gateway) bool { return x.IP == g.IP }) {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b Gateway) int { return a.IP.Compare(b.IP) })
	return out
}

// stillLocal keeps the routes whose pod still is a local pod with that address: upstream
// removes a deleted pod's routes whatever its policy's state.
func stillLocal(routes []Route, pods []dataplane.Pod) []Route {
	var out []Route
	for _, r := range routes {
		if slices.ContainsFunc(pods, func(p dataplane.Pod) bool { return p.Origin == r.Pod && slices.Contains(p.IPs, r.PodIP) }) {
			out = append(out, r)
		}
	}
	return out
}

// dedupByPodIP keeps the first route of each address. Two policies only meet on a pod when a
// failing policy keeps routes in a namespace it no longer holds; the older policy keeps it.
func dedupByPodIP(routes []Route) []Route {
	seen := map[netip.Addr]bool{}
	out := routes[:0]
	for _, r := range routes {
		if !seen[r.PodIP] {
			seen[r.PodIP] = true
			out = append(out, r)
		}
	}
	return slices.Clip(out)
}

// compareOrigin orders pods by namespace and name.
func compareOrigin(a, b dataplane.Origin) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}
