package egressservice

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers/watcherstest"
)

var networks = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48"), netip.MustParsePrefix("10.96.0.0/16")}

func compileNode(t *testing.T, node string, objs ...runtime.Object) Part {
	t.Helper()
	in := &cluster.Input{Snap: watcherstest.Snapshot(objs...), Node: node, Networks: networks}
	part, err := Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	return part
}

func node(name, primary4, primary6 string) *corev1.Node {
	v := `{"ipv4":"` + primary4 + `"}`
	if primary6 != "" {
		v = `{"ipv4":"` + primary4 + `","ipv6":"` + primary6 + `"}`
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		cluster.PrimaryIfAddrAnnotation: v}}}
}

func lbService(ns, name string, ingress ...string) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIPs: []string{"10.96.0.10"}}}
	for _, ip := range ingress {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

// slice holds endpoints as "node=ip".
func slice(ns, svc, name string, typ discoveryv1.AddressType, eps ...[2]string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}, AddressType: typ}
	for _, e := range eps {
		n := e[0]
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e[1]}, NodeName: &n})
	}
	return s
}

func egressService(ns, name, host string, by ovnv1.SourceIPMode, network string) *ovnv1.EgressService {
	return &ovnv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ovnv1.EgressServiceSpec{SourceIPBy: by, Network: network}, Status: ovnv1.EgressServiceStatus{Host: host}}
}

var a = netip.MustParseAddr

// The host node SNATs every endpoint (its own and those of other nodes) to the LB IP of the
// family; another node steers its local endpoints to the host's primary address; host-network
// endpoints and FQDN slices are ignored; an endpoint of a family without LB IP is untouched.
func TestCompileLoadBalancerIP(t *testing.T) {
	objs := []runtime.Object{
		node("n1", "192.0.2.1/24", "2001:db8::1/64"), node("n2", "192.0.2.2/24", "2001:db8::2/64"), node("n3", "192.0.2.3/24", ""),
		lbService("a", "web", "172.18.0.200", "172.18.0.210"), // the last of a family counts, as upstream
		slice("a", "web", "web-1", discoveryv1.AddressTypeIPv4, [2]string{"n1", "10.244.1.5"}, [2]string{"n2", "10.244.2.5"},
			[2]string{"n3", "192.0.2.3"} /* host network */),
		slice("a", "web", "web-2", discoveryv1.AddressTypeIPv6, [2]string{"n2", "fd00:10:244:2::5"}),
		slice("a", "web", "web-3", discoveryv1.AddressTypeFQDN, [2]string{"n2", "10.244.2.9"}),
		egressService("a", "web", "n1", "", ""),
	}
	o := Origin("a", "web")
	lb := a("172.18.0.210")
	n1 := compileNode(t, "n1", objs...)
	wantSNAT := []dataplane.SNAT{{Origin: o, Pod: a("10.244.1.5"), To: lb}, {Origin: o, Pod: a("10.244.2.5"), To: lb}}
	if !reflect.DeepEqual(n1.SNAT, wantSNAT) || len(n1.Steer) != 0 {
		t.Errorf("host n1: snat %+v steer %+v, want snat %+v", n1.SNAT, n1.Steer, wantSNAT)
	}
	n2 := compileNode(t, "n2", objs...)
	wantSteer := []cluster.Steer{{Origin: o, PodIP: a("10.244.2.5"), Via: []netip.Addr{a("192.0.2.1")}}}
	if !reflect.DeepEqual(n2.Steer, wantSteer) || len(n2.SNAT) != 0 {
		t.Errorf("n2: steer %+v snat %+v, want steer %+v", n2.Steer, n2.SNAT, wantSteer)
	}
	want := []netip.Addr{a("10.244.1.5"), a("10.244.2.5")}
	for _, p := range []Part{n1, n2} {
		if !reflect.DeepEqual(p.Guarded, want) || !reflect.DeepEqual(p.Served, want) {
			t.Errorf("guarded %v served %v, want %v", p.Guarded, p.Served, want)
		}
		for _, e := range []string{"10.244.0.0/16", "192.0.2.1/32", "192.0.2.3/32", "2001:db8::2/128"} {
			found := false
			for _, x := range p.Exempt {
				found = found || x == netip.MustParsePrefix(e)
			}
			if !found {
				t.Errorf("exempt %v lacks %s", p.Exempt, e)
			}
		}
		if len(p.Rules) != 0 {
			t.Errorf("rules %+v without network", p.Rules)
		}
	}
	if n3 := compileNode(t, "n3", objs...); len(n3.SNAT)+len(n3.Steer) != 0 {
		t.Errorf("n3 (no endpoint, not host): %+v", n3)
	}
}

// Nothing applies without a host, without a LoadBalancer Service, or without an ingress IP.
func TestCompileNotApplicable(t *testing.T) {
	base := []runtime.Object{node("n1", "192.0.2.1/24", ""),
		slice("a", "web", "web-1", discoveryv1.AddressTypeIPv4, [2]string{"n1", "10.244.1.5"})}
	clusterIP := lbService("a", "web", "172.18.0.210")
	clusterIP.Spec.Type = corev1.ServiceTypeClusterIP
	for name, objs := range map[string][]runtime.Object{
		"no host":       {egressService("a", "web", "", "", ""), lbService("a", "web", "172.18.0.210")},
		"no service":    {egressService("a", "web", "n1", "", "")},
		"ClusterIP":     {egressService("a", "web", "n1", "", ""), clusterIP},
		"no ingress IP": {egressService("a", "web", "n1", "", ""), lbService("a", "web")},
		"other name":    {egressService("a", "api", "n1", "", ""), lbService("a", "web", "172.18.0.210")},
	} {
		p := compileNode(t, "n1", append(objs, base...)...)
		if len(p.SNAT)+len(p.Steer)+len(p.Guarded)+len(p.Served)+len(p.Rules) != 0 {
			t.Errorf("%s: %+v", name, p)
		}
	}
}

// sourceIPBy Network (host ALL): every node routes its local endpoints and the ClusterIPs
// through the network's table, no SNAT; with LoadBalancerIP and a network, the host node
// routes every endpoint and SNATs.
func TestCompileNetwork(t *testing.T) {
	objs := []runtime.Object{node("n1", "192.0.2.1/24", ""), node("n2", "192.0.2.2/24", ""),
		lbService("a", "web", "172.18.0.210"),
		slice("a", "web", "web-1", discoveryv1.AddressTypeIPv4, [2]string{"n1", "10.244.1.5"}, [2]string{"n2", "10.244.2.5"}),
		egressService("a", "web", "ALL", ovnv1.SourceIPNetwork, "blue"),
	}
	o := Origin("a", "web")
	n1 := compileNode(t, "n1", objs...)
	want := []NetworkRule{{o, a("10.96.0.10"), "blue"}, {o, a("10.244.1.5"), "blue"}}
	if !reflect.DeepEqual(n1.Rules, want) || len(n1.SNAT)+len(n1.Steer)+len(n1.Guarded)+len(n1.Served) != 0 {
		t.Errorf("Network on n1: %+v, want rules %+v only", n1, want)
	}
	objs[len(objs)-1] = egressService("a", "web", "n1", ovnv1.SourceIPLoadBalancer, "100")
	n1 = compileNode(t, "n1", objs...)
	want = []NetworkRule{{o, a("10.96.0.10"), "100"}, {o, a("10.244.1.5"), "100"}, {o, a("10.244.2.5"), "100"}}
	if !reflect.DeepEqual(n1.Rules, want) || len(n1.SNAT) != 2 {
		t.Errorf("LoadBalancerIP+network on host n1: rules %+v snat %+v, want rules %+v and 2 SNAT", n1.Rules, n1.SNAT, want)
	}
	if n2 := compileNode(t, "n2", objs...); len(n2.Rules) != 0 || len(n2.Steer) != 1 {
		t.Errorf("LoadBalancerIP+network on n2: rules %+v steer %+v, want no rule, one steer", n2.Rules, n2.Steer)
	}
	// sourceIPBy Network with a node as host (a stale status): nothing.
	objs[len(objs)-1] = egressService("a", "web", "n1", ovnv1.SourceIPNetwork, "blue")
	if n1 := compileNode(t, "n1", objs...); len(n1.Rules)+len(n1.SNAT) != 0 {
		t.Errorf("Network with host n1: %+v", n1)
	}
	// Host ALL on a Service that is not a LoadBalancer (the controller writes it as upstream):
	// nothing, as upstream's nodes, until it is one with an ingress IP.
	objs[len(objs)-1] = egressService("a", "web", "ALL", ovnv1.SourceIPNetwork, "blue")
	objs[2].(*corev1.Service).Spec.Type = corev1.ServiceTypeClusterIP
	if n1 := compileNode(t, "n1", objs...); len(n1.Rules)+len(n1.SNAT)+len(n1.Guarded) != 0 {
		t.Errorf("Network, host ALL, ClusterIP Service on n1: %+v", n1)
	}
}
