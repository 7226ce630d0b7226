package externalroute

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// Upstream's legacy external-gateway annotations (removed upstream in 2026; still honoured
// here behind Compiler.Legacy so that clusters migrating to the CRD keep working).
const (
	routingExternalGWsKey = "k8s.ovn.org/routing-external-gws" // namespace: static gateways
	routingNamespacesKey  = "k8s.ovn.org/routing-namespaces"   // gateway pod: namespaces it serves
	routingNetworkKey     = "k8s.ovn.org/routing-network"      // gateway pod: its Multus network
	bfdEnabledKey         = "k8s.ovn.org/bfd-enabled"          // namespace or gateway pod: presence enables BFD
)

// addLegacy merges the legacy gateways into the policies' routes as upstream did: per pod, the
// union; a gateway a policy already routes the pod through is the policy's (its BFD setting
// holds, and the route keeps the policy's origin). A pod that only annotations route gets the
// origin {cluster.KindExternalRoute, Namespace: its namespace} with no Name.
func addLegacy(in *cluster.Input, namespaces []*corev1.Namespace, routes []Route) ([]Route, []string) {
	groups, warnings := legacyGroups(in, namespaces)
	pods := slices.Clone(in.Pods)
	slices.SortFunc(pods, func(a, b dataplane.Pod) int { return compareOrigin(a.Origin, b.Origin) })
	for _, pod := range pods {
		gs := groups[pod.Origin.Namespace]
		if len(gs) == 0 {
			continue
		}
		added := 0
		for _, ip := range pod.IPs {
			i := slices.IndexFunc(routes, func(r Route) bool { return r.PodIP == ip })
			if i < 0 {
				routes = append(routes, Route{Origin: dataplane.Origin{Kind: cluster.KindExternalRoute, Namespace: pod.Origin.Namespace},
					Pod: pod.Origin, PodIP: ip})
				i = len(routes) - 1
			}
			for _, g := range gs {
				fam := ofFamily(g, ip)
				added += len(fam)
				routes[i].Gateways = mergeGateways(routes[i].Gateways, fam)
			}
			if len(routes[i].Gateways) == 0 {
				routes = slices.Delete(routes, i, i+1)
			}
		}
		if added == 0 {
			warnings = append(warnings, noRouteError(pod).Error())
		}
	}
	return routes, warnings
}

// legacyGroups are, per target namespace, its gateway groups in upstream's order: the
// namespace's own annotation first, then each gateway pod serving it. Gateway pods are taken
// oldest first; a pod bringing an address another pod already serves the namespace with is
// refused for that namespace, as upstream refused the later one.
func legacyGroups(in *cluster.Input, namespaces []*corev1.Namespace) (map[string][][]Gateway, []string) {
	groups := map[string][][]Gateway{}
	var warnings []string
	for _, ns := range namespaces {
		v, ok := ns.Annotations[routingExternalGWsKey]
		if !ok {
			continue
		}
		ips, err := parseRoutingExternalGWs(v)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("namespace %s: failed to parse external gateway annotation (%v)", ns.Name, err))
			continue
		}
		_, bfd := ns.Annotations[bfdEnabledKey]
		set := hopSet{}
		for _, ip := range ips {
			set[ip] = bfd
		}
		if len(set) > 0 {
			groups[ns.Name] = append(groups[ns.Name], set.sorted())
		}
	}
	pods, err := in.Snap.Pods.List(labels.Everything())
	if err != nil {
		return groups, append(warnings, err.Error())
	}
	slices.SortFunc(pods, func(a, b *watchers.Pod) int {
		if t := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); t != 0 {
			return t
		}
		return strings.Compare(podKey(a), podKey(b))
	})
	owner := map[string]map[netip.Addr]string{} // namespace -> gateway address -> pod key
	for _, pod := range pods {
		served := pod.Annotations[routingNamespacesKey]
		if served == "" {
			continue
		}
		if !canServe(pod) {
			warnings = append(warnings, notServingWarning(pod))
			continue
		}
		ips, err := legacyPodIPs(pod)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("Error getting exgw IPs for pod: %s, error: %v", pod.Name, err))
			continue
		}
		if len(ips) == 0 {
			warnings = append(warnings, fmt.Sprintf("No valid gateway IPs found for requested external gateway pod: %s", pod.Name))
			continue
		}
		_, bfd := pod.Annotations[bfdEnabledKey]
		set := hopSet{}
		for _, ip := range ips {
			set[ip] = bfd
		}
		for _, ns := range strings.Split(served, ",") {
			if owner[ns] == nil {
				owner[ns] = map[netip.Addr]string{}
			}
			if dup := slices.IndexFunc(ips, func(ip netip.Addr) bool { return owner[ns][ip] != "" }); dup >= 0 {
				warnings = append(warnings, fmt.Sprintf("unable to add pod: %s/%s as external gateway for namespace: %s, error: "+
					"duplicate IP found in ECMP Pod route cache! IP: %q, first pod: %q, second pod: %q",
					pod.Namespace, pod.Name, ns, ips[dup].String(), owner[ns][ips[dup]], podKey(pod)))
				continue
			}
			for _, ip := range ips {
				owner[ns][ip] = podKey(pod)
			}
			groups[ns] = append(groups[ns], set.sorted())
		}
	}
	return groups, warnings
}

// parseRoutingExternalGWs is upstream's ParseRoutingExternalGWAnnotation: comma-separated, no
// spaces allowed, duplicates ignored, one bad address rejects the annotation.
func parseRoutingExternalGWs(v string) ([]netip.Addr, error) {
	var out []netip.Addr
	if v == "" {
		return nil, nil
	}
	for _, s := range strings.Split(v, ",") {
		ip, ok := parseIP(s)
		if !ok {
			return nil, fmt.Errorf("could not parse routing external gw annotation value %s", s)
		}
		if !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out, nil
}

// legacyPodIPs is upstream's legacy getExGwPodIPs: unlike a dynamic hop, a missing network
// entry only yields no address.
func legacyPodIPs(pod *watchers.Pod) ([]netip.Addr, error) {
	if network := pod.Annotations[routingNetworkKey]; network != "" {
		ips, _, err := networkStatusIPs(pod, network)
		if err != nil {
			return nil, fmt.Errorf("unable to unmarshall annotation %s on pod %s: %v", networkStatusKey, pod.Name, err)
		}
		return ips, nil
	}
	if pod.Spec.HostNetwork {
		return hostNetworkIPs(pod), nil
	}
	return nil, fmt.Errorf("ignoring pod %s as an external gateway candidate. Invalid combination "+
		"of host network: %t and routing-network annotation: %s", pod.Name, pod.Spec.HostNetwork, pod.Annotations[routingNetworkKey])
}

// podKey is upstream's makePodGWKey.
func podKey(pod *watchers.Pod) string { return pod.Namespace + "_" + pod.Name }
