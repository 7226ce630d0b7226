package cluster

import (
	"net/netip"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/watchers"
)

// The cluster's DNS Service, as kubeadm, kOps, k3s and the managed offerings name it (CoreDNS
// keeps kube-dns's name for the pods' resolv.conf).
const (
	ClusterDNSNamespace = "kube-system"
	ClusterDNSService   = "kube-dns"
)

// ClusterDNS are the addresses the cluster's DNS Service answers from: its cluster IPs (a
// resolver on the node, node-local DNS, answers from them) and its endpoints (what a pod's
// answer carries before kube-proxy's un-DNAT), plus extra (the agent's own resolvers). These
// are the resolvers whose answers teach dnsName rules.
func ClusterDNS(snap *watchers.Snapshot, extra []netip.Addr) []netip.Addr {
	out := slices.Clone(extra)
	if svc, err := snap.Services.Services(ClusterDNSNamespace).Get(ClusterDNSService); err == nil {
		for _, ip := range svc.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				out = append(out, a)
			}
		}
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: ClusterDNSService})
	eps, _ := snap.EndpointSlices.EndpointSlices(ClusterDNSNamespace).List(sel)
	for _, s := range eps {
		for _, e := range s.Endpoints {
			for _, ip := range e.Addresses {
				if a, err := netip.ParseAddr(ip); err == nil {
					out = append(out, a)
				}
			}
		}
	}
	return out
}
