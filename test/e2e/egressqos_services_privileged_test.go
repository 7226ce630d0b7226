package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

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
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10"); err != nil {
		t.Fatal(err)
	}
	ns, free := l.CP.Namespace(t), l.CP.Namespace(t)
	p0, p1 := addPod(t, l.Nodes[0], ns, "p0", lab.PodOptions{}), addPod(t, l.Nodes[1], ns, "p1", lab.PodOptions{})
	f0 := addPod(t, l.Nodes[0], free, "f0", lab.PodOptions{})

	ip, ip6 := selectorlessService(t, l, free, "ext", []backendPort{{"dns", corev1.ProtocolUDP, 80, 80}}, []string{"203.0.113.10"}, []string{"2001:db8::10"})
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
	applyQoS(t, l, ns, `
  - {dscp: 46, dstCIDR: 203.0.113.0/24}
  - {dscp: 30, dstCIDR: "2001:db8::/48"}
  - {dscp: 10}`)
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
