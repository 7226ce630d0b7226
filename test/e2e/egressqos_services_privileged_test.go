package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressQoSServiceBackends: a pod's traffic through a Service to an external
// backend gets the DSCP of the first rule that covers the backend, as upstream's to-lport QoS
// sees it after load balancing, not the rule that covers the cluster IP: the external server
// sees it, ECN kept, IPv4 and IPv6, both CNI shapes. The lab nodes DNAT the cluster IP as
// kube-proxy would. On the routed shape the table inet egressd sets it after DNAT (the
// classifier saw the cluster IP); on the bridged one br_netfilter DNATs before the classifier.
func TestPrivilegedEgressQoSServiceBackends(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10"); err != nil {
		t.Fatal(err)
	}
	ns, free := l.CP.Namespace(t), l.CP.Namespace(t)
	p0, p1 := addPod(t, l.Nodes[0], ns, "p0", lab.PodOptions{}), addPod(t, l.Nodes[1], ns, "p1", lab.PodOptions{})
	f0 := addPod(t, l.Nodes[0], free, "f0", lab.PodOptions{})

	kc := l.CP.Client(t)
	svc, err := kc.CoreV1().Services(free).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ext"},
		Spec: corev1.ServiceSpec{
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports:          []corev1.ServicePort{{Name: "dns", Port: 80, Protocol: corev1.ProtocolUDP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, ep := range map[string]struct {
		family discoveryv1.AddressType
		addr   string
	}{"ext-4": {discoveryv1.AddressTypeIPv4, "203.0.113.10"}, "ext-6": {discoveryv1.AddressTypeIPv6, "2001:db8::10"}} {
		if _, err := kc.DiscoveryV1().EndpointSlices(free).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "ext", discoveryv1.LabelManagedBy: "egressd-e2e"}},
			AddressType: ep.family,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ep.addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolUDP)}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ip, ip6 := svc.Spec.ClusterIPs[0], svc.Spec.ClusterIPs[1]
	for _, n := range l.Nodes { // what kube-proxy would program
		if err := n.Nft(fmt.Sprintf(`table inet labproxy {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %s udp dport 80 dnat ip to 203.0.113.10:80
		ip6 daddr %s udp dport 80 dnat ip6 to [2001:db8::10]:80
	}
}`, ip, ip6)); err != nil {
			t.Fatal(err)
		}
	}
	applyAndWait(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressQoS
metadata: {name: default}
spec:
  egress:
  - {dscp: 46, dstCIDR: 203.0.113.0/24}
  - {dscp: 30, dstCIDR: "2001:db8::/48"}
  - {dscp: 10}`, qosApplied)
	svc4, svc6 := ip+":80", "["+ip6+"]:80"
	for _, c := range []struct {
		p    *lab.Pod
		dst  string
		want int
	}{
		{p0, "203.0.113.10:80", 46}, // direct: the classifier
		{p0, svc4, 46},              // through the Service: the backend's rule, not rule 2 (any), which covers the cluster IP
		{p1, svc4, 46},
		{p0, svc6, 30},
		{p1, svc6, 30},
		{f0, svc4, 0}, // no EgressQoS in its namespace
	} {
		poll.Eventually(t, "DSCP by the first rule that covers the backend", 10*time.Second, dscpIs(c.p, c.dst, c.want))
	}
}
