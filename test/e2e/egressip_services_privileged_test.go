package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressIPThroughServiceToOutside: a selected pod that reaches an external host
// through a Service's cluster IP (a selectorless Service, as for an external database; the
// kubernetes Service of a managed control plane) leaves with its egress IP, as upstream's
// reroute policies, which match after OVN's load balancer, send it: on the routed node the
// classifier saw only the cluster IP (exempt), so the pod's mark is set after DNAT; on the
// bridged node br_netfilter DNATs before the classifier. Without the mark the leak guard drops
// the connection. Both families; the same pods reach the host directly with the egress IP too.
func TestPrivilegedEgressIPThroughServiceToOutside(t *testing.T) {
	privileged.Require(t)
	empty := ""
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true,
		NodeLabels: map[int]map[string]string{0: {assignable: empty}, 1: {assignable: empty}}})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10"); err != nil {
		t.Fatal(err)
	}
	if err := l.StartKubeProxy(ctx); err != nil {
		t.Fatal(err)
	}
	ns := egressNamespace(t, l)
	sel := map[string]string{"app": "eip"}
	sel0 := addPod(t, l.Nodes[0], ns, "sel0", lab.PodOptions{Labels: sel})
	sel1 := addPod(t, l.Nodes[1], ns, "sel1", lab.PodOptions{Labels: sel})
	svc4, svc6 := selectorlessService(t, l, ns, "db", []backendPort{{"http", corev1.ProtocolTCP, 80, 80}, {"dns", corev1.ProtocolUDP, 80, 80}},
		[]string{"203.0.113.10"}, []string{"2001:db8::10"})
	name := "eip-" + ns
	createEgressIP(t, l, name, "eip", eip4, eip6)
	n0, n1 := l.Nodes[0], l.Nodes[1]
	waitItems(t, l, name, n0.Name+"="+eip4, n1.Name+"="+eip6)

	v4, v6 := netip.MustParseAddr(eip4), netip.MustParseAddr(eip6)
	eventuallySource(t, "steered from the routed node, directly", sel0, "[2001:db8::10]:80", v6)
	eventuallySource(t, "steered from the routed node, through the Service", sel0, "["+svc6+"]:80", v6)
	eventuallySource(t, "steered from the bridged node, through the Service", sel1, svc4+":80", v4)
	eventuallySource(t, "the egress node's own pod, through the Service", sel0, svc4+":80", v4)

	// A Service of the cluster reached through its external IP: the classifier marks the packet
	// (an external IP is not exempt), DNAT sends it to a pod, and the mark comes off: the
	// connection goes straight to the pod, not through the IPv6 egress node.
	other := l.CP.Namespace(t)
	backend := addPod(t, n0, other, "backend", lab.PodOptions{})
	if err := backend.Serve(8080); err != nil {
		t.Fatal(err)
	}
	selectorlessService(t, l, other, "inside", []backendPort{{"http", corev1.ProtocolTCP, 80, 8080}},
		[]string{backend.IPv4.String()}, []string{backend.IPv6.String()})
	kc := l.CP.Client(t)
	inside, err := kc.CoreV1().Services(other).Get(ctx, "inside", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inside.Spec.ExternalIPs = []string{"2001:db8:60::60"}
	if _, err := kc.CoreV1().Services(other).Update(ctx, inside, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "sel0 reaches the pod behind the external IP", 10*time.Second, func() error {
		if r := sel0.TCP("[2001:db8:60::60]:80", lab.ClientOptions{Timeout: quick}); r.Outcome != lab.OK || r.Seen.Src != sel0.IPv6 {
			return fmt.Errorf("%s, want ok from %s", r, sel0.IPv6)
		}
		return nil
	})
	if out, _ := n1.NS.Run("conntrack", "-L", "-f", "ipv6", "-d", backend.IPv6.String()); strings.Contains(out, backend.IPv6.String()) {
		t.Errorf("the connection to the pod behind the external IP went through the egress node %s:\n%s", n1.Name, out)
	}
}
