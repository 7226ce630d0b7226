package nodeagent

import (
	"net/netip"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/dataplane"
)

// backend is one address, protocol and port a Service load-balances to.
type backend struct {
	addr  netip.Addr
	proto uint8
	port  uint16
}

// compileServiceBackends judges Service backends outside the cluster networks by each local
// namespace's EgressFirewall, as OVN does after load balancing (upstream filters pod -> ClusterIP
// -> external endpoint by the endpoint's address). Each denied (pod, backend, protocol, port)
// becomes an element the dataplane drops after DNAT. A firewall that failed to compile adds
// nothing here; the dataplane keeps what it enforced (fail closed).
func compileServiceBackends(in *input, into *dataplane.State) error {
	backends, err := externalBackends(in)
	if err != nil || len(backends) == 0 {
		return err
	}
	pods := map[string][]netip.Addr{}
	for _, p := range into.LocalPods {
		pods[p.Origin.Namespace] = append(pods[p.Origin.Namespace], p.IPs...)
	}
	for _, fw := range into.Firewalls {
		if fw.Err != nil || len(pods[fw.Origin.Namespace]) == 0 {
			continue
		}
		for _, b := range backends {
			rule, deny := firstMatch(fw.Rules, b)
			if !deny {
				continue
			}
			origin := fw.Origin
			origin.Rule = rule
			for _, pod := range pods[fw.Origin.Namespace] {
				if pod.Is4() == b.addr.Is4() {
					into.BackendDenies = append(into.BackendDenies, dataplane.BackendDeny{Origin: origin, Pod: pod, Backend: b.addr, Protocol: b.proto, Port: b.port})
				}
			}
		}
	}
	return nil
}

// firstMatch is the rule deciding traffic to b, as the classifier would decide it.
func firstMatch(rules []dataplane.FirewallRule, b backend) (int, bool) {
	for _, r := range rules {
		if !slices.ContainsFunc(r.Prefixes, func(p netip.Prefix) bool { return p.Contains(b.addr) }) {
			continue
		}
		if len(r.Ports) > 0 && !slices.Contains(r.Ports, dataplane.Port{Protocol: b.proto, Port: b.port}) {
			continue
		}
		return r.Index, r.Deny
	}
	return -1, false
}

// externalBackends are the ready endpoints outside the cluster networks of Services that have a
// cluster IP (headless Services are not load-balanced), with their ports.
func externalBackends(in *input) ([]backend, error) {
	all, err := in.snap.EndpointSlices.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	seen := map[backend]bool{}
	for _, eps := range all {
		name := eps.Labels[discoveryv1.LabelServiceName]
		if name == "" || eps.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		svc, err := in.snap.Services.Services(eps.Namespace).Get(name)
		if err != nil || len(svc.Spec.ClusterIPs) == 0 || svc.Spec.ClusterIPs[0] == corev1.ClusterIPNone {
			continue
		}
		for _, ep := range eps.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil || slices.ContainsFunc(in.cluster, func(p netip.Prefix) bool { return p.Contains(addr) }) {
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
					seen[backend{addr: addr, proto: protocols[string(proto)], port: uint16(*port.Port)}] = true
				}
			}
		}
	}
	out := make([]backend, 0, len(seen))
	for b := range seen {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].addr.Compare(out[j].addr); c != 0 {
			return c < 0
		}
		return out[i].proto < out[j].proto || out[i].proto == out[j].proto && out[i].port < out[j].port
	})
	return out, nil
}
