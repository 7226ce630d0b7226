package egressfirewall

import (
	"net/netip"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// serviceBackendDenies judges Service backends outside the cluster networks by each local
// namespace's EgressFirewall, as OVN does after load balancing (upstream filters pod -> ClusterIP
// -> external endpoint by the endpoint's address). Each denied (pod, backend, protocol, port)
// becomes an element the dataplane drops after DNAT. A firewall that failed to compile adds
// nothing here; the dataplane keeps what it enforced (fail closed).
func serviceBackendDenies(in *cluster.Input, firewalls []dataplane.Firewall) ([]dataplane.BackendDeny, error) {
	backends, err := cluster.ExternalBackends(in)
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
