package cluster

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/egressd/egressd/dataplane"
)

// A Service's frontends are each port of its external IPs and of its load-balancer ingress IPs
// (a node's address too), and each node port on this node's addresses (not its cloud external
// IP), but an address of a family the Service has no cluster IP of, an ingress IP in ipMode
// Proxy, a hostname, the ingress of a Service no longer of type LoadBalancer, and the addresses
// of Services kube-proxy does not serve (headless, ExternalName, another proxy's). None is a
// cluster network.
func TestFrontends(t *testing.T) {
	proxy, vip := corev1.LoadBalancerIPModeProxy, corev1.LoadBalancerIPModeVIP
	web := []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}, {Name: "sctp", Protocol: corev1.ProtocolSCTP, Port: 9}}
	svc := func(name string, typ corev1.ServiceType, clusterIPs string, ports []corev1.ServicePort, external []string, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:   corev1.ServiceSpec{Type: typ, ClusterIPs: strings.Split(clusterIPs, ","), Ports: ports, ExternalIPs: external},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}}}
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, s := range []*corev1.Service{
		svc("lb", corev1.ServiceTypeLoadBalancer, "10.96.0.10,fd00:96::10", []corev1.ServicePort{{Port: 80, NodePort: 30081}}, nil,
			corev1.LoadBalancerIngress{IP: "198.51.100.1"}, corev1.LoadBalancerIngress{IP: "2001:db8::1", IPMode: &vip},
			corev1.LoadBalancerIngress{IP: "198.51.100.2", IPMode: &proxy}, corev1.LoadBalancerIngress{Hostname: "lb.example.com"}),
		svc("servicelb", corev1.ServiceTypeLoadBalancer, "10.96.0.11", web[:1], nil, corev1.LoadBalancerIngress{IP: "172.18.0.2"}),
		svc("external", corev1.ServiceTypeClusterIP, "10.96.0.12", web, []string{"192.0.2.7", "::ffff:192.0.2.8", "2001:db8::7"}),
		svc("same-frontend", corev1.ServiceTypeNodePort, "10.96.0.13", []corev1.ServicePort{{Port: 80, NodePort: 30080}}, []string{"192.0.2.7"}),
		svc("was-lb", corev1.ServiceTypeClusterIP, "10.96.0.14", web[:1], nil, corev1.LoadBalancerIngress{IP: "198.51.100.3"}),
		svc("headless", corev1.ServiceTypeClusterIP, corev1.ClusterIPNone, web[:1], []string{"192.0.2.9"}),
		svc("name", corev1.ServiceTypeExternalName, "", web[:1], []string{"192.0.2.10"}),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "no-cluster-ip"}, Spec: corev1.ServiceSpec{Ports: web[:1], ExternalIPs: []string{"192.0.2.11"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other-proxy", Labels: map[string]string{"service.kubernetes.io/service-proxy-name": "x"}},
			Spec: corev1.ServiceSpec{ClusterIPs: []string{"10.96.0.15"}, Ports: web[:1], ExternalIPs: []string{"192.0.2.12"}}},
	} {
		_ = idx.Add(s)
	}
	self, other := podNode("n1", "10.244.1.0/24"), podNode("n2", "10.244.2.0/24")
	self.Annotations = map[string]string{HostCIDRsKey: `["172.18.0.5/24","fd00:18::5/64"]`}
	self.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.5"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.99"}}
	other.Annotations = map[string]string{HostCIDRsKey: `["172.18.0.6/24"]`}
	snap := snapshot([]*corev1.Node{self, other})
	snap.Services = corelisters.NewServiceLister(idx)
	f := func(a string, proto uint8, port uint16) dataplane.Frontend {
		return dataplane.Frontend{Addr: netip.MustParseAddr(a), Port: dataplane.Port{Protocol: proto, Port: port}}
	}
	want := []dataplane.Frontend{f("172.18.0.2", 6, 80), f("172.18.0.5", 6, 30080), f("172.18.0.5", 6, 30081),
		f("192.0.2.7", 6, 80), f("192.0.2.7", 17, 53), f("192.0.2.7", 132, 9), f("192.0.2.8", 6, 80), f("192.0.2.8", 17, 53), f("192.0.2.8", 132, 9),
		f("198.51.100.1", 6, 80), f("2001:db8::1", 6, 80), f("fd00:18::5", 6, 30081)}
	if got := Frontends(snap, "n1"); !slices.Equal(got, want) {
		t.Errorf("frontends\n got %v\nwant %v", got, want)
	}
}

// A Service's load-balancer ingress IPs are VIPs, except an ingress IP in ipMode Proxy, one
// that is a node's address (k3s' ServiceLB, kube-vip), one of a family the Service has no cluster
// IP of, the ingress of a Service that is no longer of type LoadBalancer, and that of a Service
// another proxy serves; its external IPs, which any Service author sets to any address, are not.
// None is a cluster network.
func TestLoadBalancerVIPs(t *testing.T) {
	proxy, vip := corev1.LoadBalancerIPModeProxy, corev1.LoadBalancerIPModeVIP
	lb := func(name string, typ corev1.ServiceType, external []string, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:   corev1.ServiceSpec{Type: typ, ClusterIPs: []string{"10.96.0.1", "fd00:96::1"}, ExternalIPs: external},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}}}
	}
	v4only := lb("v4only", corev1.ServiceTypeLoadBalancer, nil, corev1.LoadBalancerIngress{IP: "198.51.100.4"}, corev1.LoadBalancerIngress{IP: "2001:db8::4"})
	v4only.Spec.ClusterIPs = v4only.Spec.ClusterIPs[:1]
	other := lb("other-proxy", corev1.ServiceTypeLoadBalancer, nil, corev1.LoadBalancerIngress{IP: "198.51.100.5"})
	other.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "someone-else"}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, s := range []*corev1.Service{
		lb("lb", corev1.ServiceTypeLoadBalancer, nil, corev1.LoadBalancerIngress{IP: "198.51.100.1"}, corev1.LoadBalancerIngress{IP: "2001:db8::1", IPMode: &vip},
			corev1.LoadBalancerIngress{IP: "198.51.100.2", IPMode: &proxy}, corev1.LoadBalancerIngress{Hostname: "lb.example.com"}),
		lb("servicelb", corev1.ServiceTypeLoadBalancer, nil, corev1.LoadBalancerIngress{IP: "172.18.0.2"}, corev1.LoadBalancerIngress{IP: "172.18.1.9"}),
		lb("external", corev1.ServiceTypeClusterIP, []string{"192.0.2.7"}),
		lb("was-lb", corev1.ServiceTypeClusterIP, nil, corev1.LoadBalancerIngress{IP: "198.51.100.3"}),
		v4only, other,
	} {
		_ = idx.Add(s)
	}
	node := podNode("a", "10.244.0.0/24")
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.2"}}
	node.Annotations = map[string]string{HostCIDRsKey: `["172.18.0.2/24","172.18.1.9/24"]`}
	snap := snapshot([]*corev1.Node{node})
	snap.Services = corelisters.NewServiceLister(idx)
	if got, want := LoadBalancerVIPs(snap), prefixes("198.51.100.1/32", "198.51.100.4/32", "2001:db8::1/128"); !slices.Equal(got, want) {
		t.Errorf("load-balancer VIPs\n got %v\nwant %v", got, want)
	}
	if got, want := Networks(snap, NetworkFlags{}), prefixes("10.244.0.0/24"); !slices.Equal(got, want) {
		t.Errorf("networks\n got %v\nwant %v", got, want)
	}
}
