package egressfirewall

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers/watcherstest"
)

func pod(name, node string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func service(ns, name, clusterIP string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{ClusterIPs: []string{clusterIP}}}
}

func endpointSlice(ns, svc string, port int32, proto corev1.Protocol, ready bool, addrs ...string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-" + string(proto), Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}},
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To(port), Protocol: ptr.To(proto)}},
	}
}

func TestCompileServiceBackends(t *testing.T) {
	tcp := ovnv1.EgressFirewallPort{Protocol: "TCP", Port: 443}
	pa, pb := pod("pa", "n1", "10.244.0.5"), pod("pb", "n1", "10.244.0.6")
	pa.Namespace, pb.Namespace = "a", "b"
	efA := ef("a", cidrRule(ovnv1.EgressFirewallRuleAllow, "203.0.113.0/24", tcp), cidrRule(ovnv1.EgressFirewallRuleDeny, "0.0.0.0/0"))
	efB := ef("b", cidrRule(ovnv1.EgressFirewallRuleAllow, "0.0.0.0/0"))
	efA.UID, efB.UID = "uid-a", "uid-b" // compiled once per object
	draining := endpointSlice("svc", "draining", 53, corev1.ProtocolUDP, false, "198.51.100.3")
	draining.Endpoints[0].Conditions.Serving, draining.Endpoints[0].Conditions.Terminating = ptr.To(true), ptr.To(true)
	snap := watcherstest.Snapshot(
		efA, efB, pa, pb,
		service("svc", "ext", "10.96.0.20"),
		endpointSlice("svc", "ext", 443, corev1.ProtocolTCP, true, "203.0.113.10", "10.244.1.9"), // a pod backend is the classifier's
		endpointSlice("svc", "ext", 53, corev1.ProtocolUDP, true, "203.0.113.10"),
		endpointSlice("svc", "ext", 80, corev1.ProtocolSCTP, false, "198.51.100.1"), // not ready
		service("svc", "draining", "10.96.0.21"),
		draining, // terminating but serving: kube-proxy's fallback when none is ready
		service("svc", "headless", "None"),
		endpointSlice("svc", "headless", 80, corev1.ProtocolTCP, true, "198.51.100.2"),
	)
	in := &cluster.Input{Snap: snap, Node: "n1", Networks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/16")}}
	var err error
	if in.Pods, err = cluster.LocalPods(snap, "n1"); err != nil {
		t.Fatal(err)
	}
	part, err := new(Compiler).Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	want := []dataplane.BackendDeny{{
		Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: "a", Name: "default", Rule: 1},
		Pod:    netip.MustParseAddr("10.244.0.5"), Backend: netip.MustParseAddr("198.51.100.3"), Protocol: 17, Port: 53,
	}, {
		Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: "a", Name: "default", Rule: 1},
		Pod:    netip.MustParseAddr("10.244.0.5"), Backend: netip.MustParseAddr("203.0.113.10"), Protocol: 17, Port: 53,
	}}
	if !reflect.DeepEqual(part.BackendDenies, want) {
		t.Errorf("backend denies:\n got %+v\nwant %+v", part.BackendDenies, want)
	}
}
