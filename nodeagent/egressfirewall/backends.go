package egressfirewall

import (
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// Backend is one address, protocol and port a Service load-balances to.
type Backend struct {
	Addr  netip.Addr
	Proto uint8
	Port  uint16
}

// serviceBackendDenies judges Service backends outside the cluster networks by each local
// namespace's EgressFirewall, as OVN does after load balancing (upstream filters pod -> ClusterIP
// -> external endpoint by the endpoint's address). Each denied (pod, backend, protocol, port)
// becomes an element the dataplane drops after DNAT. A firewall that failed to compile adds
// nothing here; the dataplane keeps what it enforced (fail closed).
func serviceBackendDenies(in *cluster.Input, firewalls []dataplane.Firewall) ([]dataplane.BackendDeny, error) {
	backends, err := ExternalBackends(in)
	if err != nil || len(backends) == 0 {
		return nil, err
	}
	pods := map[string][]netip.Addr{}
	for _, p := range in.Pods {
		pods[p.Origin.Namespace] = append(pods[p.Origin.Namespace], p.IPs...)
	}
	var out []dataplane.BackendDeny
	for _, fw := range firewalls {
		if fw.Err != nil || len(pods[fw.Origin.Namespace]) == 0 {
			continue
		}
		for _, b := range backends {
			rule, ok := dataplane.FirstMatch(fw.Rules, b.Addr, b.Proto, b.Port)
			if !ok || !rule.Deny {
				continue
			}
			origin := fw.Origin
			origin.Rule = rule.Index
			for _, pod := range pods[fw.Origin.Namespace] {
				if pod.Is4() == b.Addr.Is4() {
					out = append(out, dataplane.BackendDeny{Origin: origin, Pod: pod, Backend: b.Addr, Protocol: b.Proto, Port: b.Port, Log: fw.Log.Deny})
				}
			}
		}
	}
	return out, nil
}

// ExternalBackends are the ready endpoints outside the cluster networks of Services that have a
// cluster IP (headless Services are not load-balanced), with their ports, in order. EgressQoS
// marks traffic to them after DNAT too.
func ExternalBackends(in *cluster.Input) ([]Backend, error) {
	all, err := in.Snap.EndpointSlices.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	seen := map[Backend]bool{}
	for _, eps := range all {
		name := eps.Labels[discoveryv1.LabelServiceName]
		if name == "" || eps.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		svc, err := in.Snap.Services.Services(eps.Namespace).Get(name)
		if err != nil || len(svc.Spec.ClusterIPs) == 0 || svc.Spec.ClusterIPs[0] == corev1.ClusterIPNone {
			continue
		}
		for _, ep := range eps.Endpoints {
			// kube-proxy sends to the ready endpoints, or to the serving terminating ones when
			// none is ready.
			if c := ep.Conditions; c.Ready != nil && !*c.Ready && (c.Serving == nil || !*c.Serving) {
				continue
			}
			for _, a := range ep.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil || in.InNetworks(addr) {
					continue
				}
				for _, port := range eps.Ports {
					if port.Port == nil {
						continue
					}
					proto := corev1.ProtocolTCP
					if port.Protocol != nil {
						proto = *port.Protocol
					}
					number, _ := dataplane.ProtocolNumber(string(proto))
					seen[Backend{Addr: addr, Proto: number, Port: uint16(*port.Port)}] = true
				}
			}
		}
	}
	out := make([]Backend, 0, len(seen))
	for b := range seen {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].Addr.Compare(out[j].Addr); c != 0 {
			return c < 0
		}
		return out[i].Proto < out[j].Proto || out[i].Proto == out[j].Proto && out[i].Port < out[j].Port
	})
	return out, nil
}
