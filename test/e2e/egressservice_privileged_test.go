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

const (
	lbIP4 = "172.18.0.210"
	lbIP6 = "fc00:f853:ccd:e793::210"
)

// TestPrivilegedEgressService: a LoadBalancer Service (its ingress IP set by the test, as an LB
// provider would) with an EgressService whose nodeSelector picks node 0: the leader writes
// status.host and labels node 0; the external host (routing the LB IP to node 0, as the LB
// provider's announcement would) sees the LB IP from the endpoints on node 0 and on the bridged
// node 1 (steered to node 0, SNATed there); a pod that is no endpoint keeps its node IP;
// node 0 going NotReady moves the service to node 2 (status, label, traffic); deleting the
// EgressService restores the node IPs and removes the label.
func TestPrivilegedEgressService(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 3, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true,
		NodeLabels: map[int]map[string]string{0: {"egress-host": "yes"}, 2: {"egress-host": "yes"}}})
	ctx := context.Background()
	web, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10")
	if err != nil {
		t.Fatal(err)
	}
	n0, n1, n2 := l.Nodes[0], l.Nodes[1], l.Nodes[2]
	// The LB provider's job (MetalLB on the labelled node): the LB IP reaches the host node.
	if out, err := web.NS.Run("ip", "route", "add", lbIP4+"/32", "via", n0.IPv4.String()); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ns := l.CP.Namespace(t)
	sel := map[string]string{"app": "lb"}
	ep0 := addPod(t, l.Nodes[0], ns, "ep0", lab.PodOptions{Labels: sel})
	ep1 := addPod(t, l.Nodes[1], ns, "ep1", lab.PodOptions{Labels: sel})
	plain1 := addPod(t, l.Nodes[1], ns, "plain1", lab.PodOptions{Labels: map[string]string{"app": "other"}})

	loadBalancerEgressService(t, l, ns, "", lbIP4)
	label := "egress-service.k8s.ovn.org/" + ns + "-lb"
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressService", ns, "lb", "status.host", n0.Name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitLabel(t, l, label, n0.Name)

	lb := netip.MustParseAddr(lbIP4)
	dst := "203.0.113.10:80"
	eventuallySource(t, "endpoint on the host node", ep0, dst, lb)
	eventuallySource(t, "endpoint on another node (bridged), steered to the host", ep1, dst, lb)
	eventuallySource(t, "a pod that is no endpoint", plain1, dst, n1.IPv4)

	// spec.network: the endpoints' traffic takes routing table 100 of the host, whose default
	// route here is a blackhole: the service cannot get out; without the network it can again.
	n0.NS.MustRun(t, "ip", "route", "add", "blackhole", "default", "table", "100")
	withNetwork := `apiVersion: k8s.ovn.org/v1
kind: EgressService
metadata:
  name: lb
spec:
  sourceIPBy: LoadBalancerIP
  network: "100"
  nodeSelector:
    matchLabels: {egress-host: "yes"}
`
	apply(t, l, ns, withNetwork)
	for _, ep := range []*lab.Pod{ep0, ep1} {
		poll.Eventually(t, ep.Name+" blackholed by the network's table", 10*time.Second, func() error {
			if r := ep.TCP(dst, lab.ClientOptions{Timeout: quick}); r.Outcome != lab.Timeout {
				return fmt.Errorf("%s", r)
			}
			return nil
		})
	}
	apply(t, l, ns, strings.Replace(withNetwork, "  network: \"100\"\n", "", 1))
	eventuallySource(t, "network removed, host node's endpoint", ep0, dst, lb)

	// The host goes NotReady: the other selected node takes the service over.
	if err := n0.SetReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressService", ns, "lb", "status.host", n2.Name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitLabel(t, l, label, n2.Name)
	if out, err := web.NS.Run("ip", "route", "replace", lbIP4+"/32", "via", n2.IPv4.String()); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	eventuallySource(t, "after the move, the old host's endpoint, steered to the new host", ep0, dst, lb)
	eventuallySource(t, "after the move, the bridged node's endpoint", ep1, dst, lb)
	if err := n0.SetReady(ctx, true); err != nil {
		t.Fatal(err)
	}

	if err := l.Kube.Delete(ctx, "k8s.ovn.org/v1", "EgressService", ns, "lb"); err != nil {
		t.Fatal(err)
	}
	eventuallySource(t, "EgressService deleted, host node's endpoint", ep0, dst, n0.IPv4)
	eventuallySource(t, "EgressService deleted, other node's endpoint", ep1, dst, n1.IPv4)
	waitLabel(t, l, label, "")
}

// TestPrivilegedEgressServiceIPv6: a dual-stack LoadBalancer Service with an IPv4 and an IPv6
// ingress IP: the external host sees the IPv6 LB IP (and the IPv4 one) from the endpoints on
// the host node and on the other node.
func TestPrivilegedEgressServiceIPv6(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, Agents: true, NodeLabels: map[int]map[string]string{0: {"egress-host": "yes"}}})
	web, err := l.AddExternal("web", lab.ExternalOptions{}, web4.String(), web6.String())
	if err != nil {
		t.Fatal(err)
	}
	n0 := l.Nodes[0]
	lb4, lb6 := netip.MustParseAddr(lbIP4), netip.MustParseAddr(lbIP6)
	routeLB(t, web, n0, lb4, lb6)
	ns := l.CP.Namespace(t)
	sel := lab.PodOptions{Labels: map[string]string{"app": "lb"}}
	ep0 := addPod(t, n0, ns, "ep0", sel)
	ep1 := addPod(t, l.Nodes[1], ns, "ep1", sel)
	loadBalancerEgressService(t, l, ns, "  ipFamilyPolicy: RequireDualStack\n", lbIP4, lbIP6)
	waitHost(t, l, ns, "lb", n0.Name)
	for _, ep := range []*lab.Pod{ep0, ep1} {
		eventuallySource(t, "IPv6", ep, webAddr(web6), lb6)
		eventuallySource(t, "IPv4", ep, webAddr(web4), lb4)
	}
}

// waitHost waits until the EgressService ns/name has status.host want.
func waitHost(t testing.TB, l *lab.Lab, ns, name, want string) {
	t.Helper()
	if err := l.Kube.WaitField(context.Background(), "k8s.ovn.org/v1", "EgressService", ns, name, "status.host", want, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// waitServiceEvent waits for a Warning event of reason on the EgressService ns/name.
func waitServiceEvent(t *testing.T, l *lab.Lab, ns, name, reason string) {
	t.Helper()
	waitEventFor(t, l.Client, ns, "involvedObject.kind=EgressService,involvedObject.name="+name+",reason="+reason,
		fmt.Sprintf("a %s event on EgressService %s/%s", reason, ns, name), func(corev1.Event) bool { return true })
}

// waitLabel waits until only node (none when "") carries label.
func waitLabel(t *testing.T, l *lab.Lab, label, node string) {
	t.Helper()
	poll.Eventually(t, fmt.Sprintf("label %s on %q only", label, node), 10*time.Second, func() error {
		for _, n := range l.Nodes {
			obj, err := l.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if _, ok := obj.Labels[label]; ok != (n.Name == node) {
				return fmt.Errorf("node %s labels %v", n.Name, obj.Labels)
			}
		}
		return nil
	})
}

// loadBalancerEgressService creates the LoadBalancer Service ns/lb of the pods labelled app=lb
// (spec holds more lines of its spec), gives it ingress (the LB provider's job), and its
// EgressService: source IP by the LB IP, from a node labelled egress-host=yes.
func loadBalancerEgressService(t *testing.T, l *lab.Lab, ns, spec string, ingress ...string) {
	t.Helper()
	loadBalancer(t, l, ns, "lb", spec, ingress...)
	apply(t, l, ns, `apiVersion: k8s.ovn.org/v1
kind: EgressService
metadata:
  name: lb
spec:
  sourceIPBy: LoadBalancerIP
  nodeSelector:
    matchLabels: {egress-host: "yes"}
`)
}

// loadBalancer creates the LoadBalancer Service ns/name of the pods labelled app=<name>, with
// spec the extra lines of its spec (indented by two spaces), and gives it the ingress IPs (the
// LB provider's job).
func loadBalancer(t testing.TB, l *lab.Lab, ns, name, spec string, ingress ...string) {
	t.Helper()
	ctx := context.Background()
	apply(t, l, ns, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %s
spec:
  type: LoadBalancer
  selector: {app: %s}
  ports: [{port: 80, protocol: TCP}]
%s`, name, name, spec))
	svc, err := l.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range ingress {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	if _, err := l.Client.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// routeLB makes the external host reach the LB IPs through node (the LB provider's
// announcement from the host node), so that replies find the endpoints.
func routeLB(t *testing.T, ext *lab.External, n *lab.Node, lbs ...netip.Addr) {
	t.Helper()
	for _, lb := range lbs {
		via := n.IPv4
		if lb.Is6() {
			via = n.IPv6
		}
		if out, err := ext.NS.Run("ip", "route", "replace", netip.PrefixFrom(lb, lb.BitLen()).String(), "via", via.String()); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
}
