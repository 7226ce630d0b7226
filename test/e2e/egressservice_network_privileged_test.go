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

// TestPrivilegedEgressServiceNetwork: sourceIPBy Network: status.host "ALL", no node label, no
// SNAT (the external host sees the endpoints' usual source, their node's masquerade); with
// spec.network, every node with endpoints routes them (and the ClusterIP) through that table,
// whose blackhole default makes the service unreachable; removing network restores it. A
// network no node knows is reported in a Warning event; so are a Service that is no
// LoadBalancer and one without ingress IP.
func TestPrivilegedEgressServiceNetwork(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	ctx := context.Background()
	web, err := l.AddExternal("web", lab.ExternalOptions{}, web4.String())
	if err != nil {
		t.Fatal(err)
	}
	n0, n1 := l.Nodes[0], l.Nodes[1]
	ns := l.CP.Namespace(t)
	sel := lab.PodOptions{Labels: map[string]string{"app": "lb"}}
	ep0 := addPod(t, n0, ns, "ep0", sel)
	ep1 := addPod(t, n1, ns, "ep1", sel)
	// An EgressService before its Service: NotApplicable until the Service is a LoadBalancer
	// with an ingress IP.
	byNetwork := func(network string) string {
		doc := "apiVersion: k8s.ovn.org/v1\nkind: EgressService\nmetadata:\n  name: lb\nspec:\n  sourceIPBy: Network\n"
		if network != "" {
			doc += "  network: \"" + network + "\"\n"
		}
		return doc
	}
	apply(t, l, ns, byNetwork(""))
	waitServiceEvent(t, l, ns, "lb", "NoLoadBalancer")
	loadBalancer(t, l, ns, "lb", "")
	waitServiceEvent(t, l, ns, "lb", "NoIngressIP")
	routeLB(t, web, n0, netip.MustParseAddr(lbIP4))
	svc, err := l.Client.CoreV1().Services(ns).Get(ctx, "lb", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: lbIP4})
	if _, err := l.Client.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHost(t, l, ns, "lb", "ALL")
	waitLabel(t, l, "egress-service.k8s.ovn.org/"+ns+"-lb", "")
	dst := lab.HostPort(web4, webPort)
	eventuallySource(t, "sourceIPBy Network, no SNAT", ep0, dst, n0.IPv4)
	eventuallySource(t, "sourceIPBy Network, no SNAT", ep1, dst, n1.IPv4)

	for _, n := range []*lab.Node{n0, n1} {
		n.NS.MustRun(t, "ip", "route", "add", "blackhole", "default", "table", "100")
	}
	apply(t, l, ns, byNetwork("100"))
	clusterIP := svc.Spec.ClusterIP
	for _, c := range []struct {
		n         *lab.Node
		own, peer *lab.Pod
	}{{n0, ep0, ep1}, {n1, ep1, ep0}} {
		poll.Eventually(t, c.n.Name+"'s rules to table 100", 10*time.Second, func() error {
			rules := c.n.NS.MustRun(t, "ip", "rule", "show")
			for _, src := range []string{c.own.IPv4.String(), clusterIP} {
				if !strings.Contains(rules, "from "+src+" lookup 100") {
					return fmt.Errorf("no rule from %s:\n%s", src, rules)
				}
			}
			if strings.Contains(rules, "from "+c.peer.IPv4.String()+" ") {
				return fmt.Errorf("a rule for the other node's endpoint %s:\n%s", c.peer.IPv4, rules)
			}
			return nil
		})
		poll.Eventually(t, c.own.Name+" blackholed by the network's table", 10*time.Second, func() error {
			if r := c.own.TCP(dst, lab.ClientOptions{Timeout: quick}); r.Outcome != lab.Timeout {
				return fmt.Errorf("%s", r)
			}
			return nil
		})
	}
	apply(t, l, ns, byNetwork("no-such-network"))
	waitServiceEvent(t, l, ns, "lb", "EgressServiceNotApplied")
	apply(t, l, ns, byNetwork(""))
	eventuallySource(t, "network removed", ep0, dst, n0.IPv4)
	eventuallySource(t, "network removed", ep1, dst, n1.IPv4)
	for _, n := range l.Nodes {
		if rules := n.NS.MustRun(t, "ip", "rule", "show"); strings.Contains(rules, "lookup 100") {
			t.Errorf("%s keeps rules to table 100:\n%s", n.Name, rules)
		}
	}
}
