package externalroute

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/watchers"
)

// networkStatusKey is Multus' pod annotation listing the pod's networks and their addresses.
const networkStatusKey = "k8s.v1.cni.cncf.io/network-status"

// networkStatus is the part of a Multus network-status entry that names gateway addresses.
type networkStatus struct {
	Name string   `json:"name"`
	IPs  []string `json:"ips"`
}

// hopSet collects gateways in upstream's insertion order: an address added again takes the
// later hop's BFD setting (upstream's GatewayInfoList.InsertOverwrite keeps a duplicate IP only
// in the latest-added entry).
type hopSet map[netip.Addr]bool

func (h hopSet) sorted() []Gateway {
	out := make([]Gateway, 0, len(h))
	for ip, bfd := range h {
		out = append(out, Gateway{IP: ip, BFD: bfd})
	}
	slices.SortFunc(out, func(a, b Gateway) int { return a.IP.Compare(b.IP) })
	return out
}

// parseIP parses like Go's net.ParseIP, which upstream uses: no zone, and an IPv4-mapped IPv6
// address is the IPv4 address (net.IP.String prints it so).
func parseIP(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// staticGateways are the policy's static hops; one unparsable IP fails the policy.
func staticGateways(hops []*ovnv1.StaticHop) (hopSet, error) {
	set := hopSet{}
	for _, h := range hops {
		ip, ok := parseIP(string(h.IP))
		if !ok {
			return nil, fmt.Errorf("could not parse routing static gw annotation value '%s'", h.IP)
		}
		set[ip] = h.BFDEnabled
	}
	return set, nil
}

// dynamicGateways are the addresses of the gateway pods the dynamic hops select. A pod that
// cannot serve (not Ready, terminating) is skipped with upstream's warning; a pod whose
// addresses cannot be found fails the whole policy, as upstream. Namespaces and pods are taken
// in name order so that the outcome (and the first error) does not depend on cache order.
func dynamicGateways(snap *watchers.Snapshot, namespaces []*corev1.Namespace, hops []*ovnv1.DynamicHop) (hopSet, []string, error) {
	set := hopSet{}
	var warnings []string
	for _, h := range hops {
		nsSel, err := metav1.LabelSelectorAsSelector(&h.NamespaceSelector)
		if err != nil {
			return nil, warnings, err
		}
		for _, ns := range namespaces {
			if !nsSel.Matches(labels.Set(ns.Labels)) {
				continue
			}
			podSel, err := metav1.LabelSelectorAsSelector(&h.PodSelector)
			if err != nil {
				return nil, warnings, fmt.Errorf("failed to convert pod selector: %w", err)
			}
			pods, err := snap.Pods.Pods(ns.Name).List(podSel)
			if err != nil {
				return nil, warnings, fmt.Errorf("failed to list pods: %w", err)
			}
			slices.SortFunc(pods, func(a, b *watchers.Pod) int { return strings.Compare(a.Name, b.Name) })
			for _, pod := range pods {
				if !canServe(pod) {
					warnings = append(warnings, notServingWarning(pod))
					continue
				}
				ips, err := podGatewayIPs(pod, h.NetworkAttachmentName)
				if err != nil {
					return nil, warnings, fmt.Errorf("failed to get external GW pod ips: %w", err)
				}
				if len(ips) == 0 {
					warnings = append(warnings, fmt.Sprintf("No valid gateway IPs found for requested external gateway pod %s/%s", pod.Namespace, pod.Name))
					continue
				}
				for _, ip := range ips {
					set[ip] = h.BFDEnabled
				}
			}
		}
	}
	return set, warnings, nil
}

// canServe: a terminating or not Ready gateway pod gets no traffic (upstream's getExGwPodIPs).
func canServe(pod *watchers.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Ready()
}

func notServingWarning(pod *watchers.Pod) string {
	return fmt.Sprintf("External gateway pod cannot serve traffic; it's in terminating or not ready state: %s/%s", pod.Namespace, pod.Name)
}

// podGatewayIPs are a gateway pod's addresses: those of its Multus network named network, or
// its own (node) addresses when it is host-networked and no network is named.
func podGatewayIPs(pod *watchers.Pod, network string) ([]netip.Addr, error) {
	if network != "" {
		ips, found, err := networkStatusIPs(pod, network)
		if err != nil {
			return nil, fmt.Errorf("unable to unmarshall annotation on pod %s %s '%s': %v",
				pod.Name, networkStatusKey, pod.Annotations[networkStatusKey], err)
		}
		if !found {
			return nil, fmt.Errorf("unable to find multus network %s in pod %s/%s", network, pod.Namespace, pod.Name)
		}
		return ips, nil
	}
	if pod.Spec.HostNetwork {
		return hostNetworkIPs(pod), nil
	}
	return nil, fmt.Errorf("ignoring pod %s as an external gateway candidate. Invalid combination "+
		"of host network: %t and routing-network annotation: %s", pod.Name, pod.Spec.HostNetwork, network)
}

// networkStatusIPs are the addresses of the first network-status entry named network (exact
// match); unparsable addresses are skipped, as upstream.
func networkStatusIPs(pod *watchers.Pod, network string) (ips []netip.Addr, found bool, err error) {
	var entries []networkStatus
	if err := json.Unmarshal([]byte(pod.Annotations[networkStatusKey]), &entries); err != nil {
		return nil, false, err
	}
	for _, e := range entries {
		if e.Name != network {
			continue
		}
		for _, s := range e.IPs {
			if ip, ok := parseIP(s); ok && !slices.Contains(ips, ip) {
				ips = append(ips, ip)
			}
		}
		return ips, true, nil
	}
	return nil, false, nil
}

func hostNetworkIPs(pod *watchers.Pod) []netip.Addr {
	var ips []netip.Addr
	for _, p := range pod.Status.PodIPs {
		if ip, ok := parseIP(p.IP); ok && !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	return ips
}

// ConfiguredGateways are every gateway address the policy name configures now (static and
// dynamic), sorted: what its success status lists. The status writer calls it with the
// snapshot; an error is the one that fails the policy's build.
func ConfiguredGateways(snap *watchers.Snapshot, name string) ([]netip.Addr, error) {
	p, err := snap.ExternalRoutes.Get(name)
	if err != nil {
		return nil, err
	}
	namespaces, err := sortedNamespaces(snap)
	if err != nil {
		return nil, err
	}
	h, _, err := buildHops(snap, namespaces, p)
	if err != nil {
		return nil, err
	}
	return h.addresses(), nil
}

// hops are a policy's compiled next hops, static and dynamic apart: upstream adds the two
// groups to a pod separately, and each must yield a route of one of the pod's families.
type hops struct{ static, dynamic []Gateway }

func (h hops) addresses() []netip.Addr {
	var out []netip.Addr
	for _, g := range slices.Concat(h.static, h.dynamic) {
		out = append(out, g.IP)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// buildHops compiles the next hops with upstream's error wrapping.
func buildHops(snap *watchers.Snapshot, namespaces []*corev1.Namespace, p *ovnv1.AdminPolicyBasedExternalRoute) (hops, []string, error) {
	static, err := staticGateways(p.Spec.NextHops.StaticHops)
	if err != nil {
		return hops{}, nil, fmt.Errorf("failed to build updated policy: failed to process static GW: %w", err)
	}
	dynamic, warnings, err := dynamicGateways(snap, namespaces, p.Spec.NextHops.DynamicHops)
	if err != nil {
		return hops{}, warnings, fmt.Errorf("failed to build updated policy: failed to process dynamic GW: %w", err)
	}
	return hops{static: static.sorted(), dynamic: dynamic.sorted()}, warnings, nil
}

func sortedNamespaces(snap *watchers.Snapshot) ([]*corev1.Namespace, error) {
	namespaces, err := snap.Namespaces.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	slices.SortFunc(namespaces, func(a, b *corev1.Namespace) int { return strings.Compare(a.Name, b.Name) })
	return namespaces, nil
}
