package cluster

import (
	"cmp"
	"net/netip"
	"slices"
	"sort"

	"go4.org/netipx"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/watchers"
)

// Frontends are the Services' frontends outside the service networks that kube-proxy (and the
// CNIs that replace it) DNATs for a pod on the pod's node: each port of the load-balancer
// ingress IPs and of spec.externalIPs, and each node port on the addresses of node (the
// agent's). Upstream's OVN load balancers translate them before its ACLs, so EgressFirewall
// judges such a flow by the backend, after DNAT, as it does a cluster IP's. The classifier,
// which sees the packet before DNAT, lets a frontend's flows through by address, protocol and
// port: the address's other ports stay judged (an external IP is any address a Service author
// picks; a load-balancer IP may be a node's, as k3s' ServiceLB reports), and nftables rejects a
// frontend's new flow that no DNAT translated (no endpoint, kube-proxy late or not serving it).
// Left out, as kube-proxy leaves them: an address of a family the Service has no cluster IP of,
// an ingress IP in ipMode Proxy (the load balancer itself is reached), the ingress of a Service
// no longer of type LoadBalancer, the Services it does not proxy (services), and node ports on
// an address not on the node (a cloud's external IP).
func Frontends(snap *watchers.Snapshot, node string) []dataplane.Frontend {
	var own []netip.Addr
	if snap.Nodes != nil {
		if n, err := snap.Nodes.Get(node); err == nil {
			own = localAddresses(n)
		}
	}
	var out []dataplane.Frontend
	for _, svc := range services(snap) {
		families := families(svc)
		addrs := slices.Clone(svc.Spec.ExternalIPs)
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			for _, ing := range svc.Status.LoadBalancer.Ingress {
				if ing.IPMode == nil || *ing.IPMode == corev1.LoadBalancerIPModeVIP {
					addrs = append(addrs, ing.IP)
				}
			}
		}
		for _, p := range svc.Spec.Ports {
			proto, ok := dataplane.ProtocolNumber(string(cmp.Or(p.Protocol, corev1.ProtocolTCP)))
			if !ok {
				continue
			}
			add := func(a netip.Addr, port int32) {
				if a = a.Unmap(); families[a.Is4()] && port > 0 && port <= 65535 {
					out = append(out, dataplane.Frontend{Addr: a, Port: dataplane.Port{Protocol: proto, Port: uint16(port)}})
				}
			}
			for _, s := range addrs {
				if a, err := netip.ParseAddr(s); err == nil { // else a hostname ingress, or an invalid address the API let through
					add(a, p.Port)
				}
			}
			if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
				for _, a := range own {
					add(a, p.NodePort)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b dataplane.Frontend) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port.Port, b.Port.Port))
	})
	return slices.Compact(out)
}

// LoadBalancerVIPs are the Services' load-balancer ingress IPs, as host prefixes, to which no
// pod's traffic is steered nor SNATed to an egress IP: kube-proxy (and the CNIs that replace
// it) DNATs them on the pod's node, and upstream's OVN load balancers before its reroutes. The
// whole address: kube-proxy's IPVS mode DNATs only at the input hook, after the routing
// decision a mark would take, where the iptables and nftables modes have egressd fix a mark
// after DNAT (as for external IPs). Left out: an ingress IP whose ipMode is Proxy (the load
// balancer itself is reached), and one that is a node's address (exempt as such).
func LoadBalancerVIPs(snap *watchers.Snapshot) []netip.Prefix {
	nodeAddrs := map[netip.Addr]bool{}
	if snap.Nodes != nil {
		nodes, _ := snap.Nodes.List(labels.Everything())
		for _, n := range nodes {
			for _, a := range HostAddresses(n) {
				nodeAddrs[a.Unmap()] = true
			}
		}
	}
	var b netipx.IPSetBuilder
	for _, svc := range services(snap) {
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		families := families(svc)
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			a, err := netip.ParseAddr(ing.IP)
			if err != nil || nodeAddrs[a.Unmap()] || !families[a.Unmap().Is4()] || (ing.IPMode != nil && *ing.IPMode != corev1.LoadBalancerIPModeVIP) {
				continue
			}
			b.Add(a.Unmap())
		}
	}
	set, err := b.IPSet()
	if err != nil || set.Equal(&netipx.IPSet{}) {
		return nil
	}
	return set.Prefixes()
}

// proxyName is the label of a Service that another proxy than kube-proxy serves: kube-proxy,
// and upstream, leave it alone.
const proxyName = "service.kubernetes.io/service-proxy-name"

// services are the Services kube-proxy serves (none before the informers run): not those of
// another proxy, nor those without a cluster IP (headless, ExternalName).
func services(snap *watchers.Snapshot) []*corev1.Service {
	if snap.Services == nil {
		return nil
	}
	all, err := snap.Services.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []*corev1.Service
	for _, svc := range all {
		if _, other := svc.Labels[proxyName]; other || len(svc.Spec.ClusterIPs) == 0 || svc.Spec.ClusterIPs[0] == corev1.ClusterIPNone ||
			svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		out = append(out, svc)
	}
	return out
}

// families are the address families of a Service's cluster IPs, by Is4: kube-proxy serves its
// other addresses of those only.
func families(svc *corev1.Service) map[bool]bool {
	out := map[bool]bool{}
	for _, c := range svc.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(c); err == nil {
			out[a.Unmap().Is4()] = true
		}
	}
	return out
}

// Backend is one address, protocol and port a Service load-balances to.
type Backend struct {
	Addr  netip.Addr
	Proto uint8
	Port  uint16
}

// ExternalBackends are the ready endpoints outside the cluster networks of Services that have a
// cluster IP (headless Services are not load-balanced), with their ports, in order: EgressFirewall
// judges and EgressQoS marks traffic to them after DNAT too.
func ExternalBackends(in *Input) ([]Backend, error) {
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
