package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressFirewallServiceBackends: a pod reaching an external backend through a
// Service's cluster IP is judged by the backend's address and port after DNAT, as upstream does
// (a Service with hand-written endpoints must not be a way around the firewall). The lab nodes
// DNAT the cluster IP as kube-proxy would; both CNI shapes. On the routed shape the table inet
// egressd decides; on the bridged one br_netfilter DNATs before the packet reaches the bridge's
// classifier, which then sees the backend itself.
func TestPrivilegedEgressFirewallServiceBackends(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10"); err != nil {
		t.Fatal(err)
	}
	ns, free := l.CP.Namespace(t), l.CP.Namespace(t)
	a0, a1 := addPod(t, l.Nodes[0], ns, "a0", lab.PodOptions{}), addPod(t, l.Nodes[1], ns, "a1", lab.PodOptions{})
	f0 := addPod(t, l.Nodes[0], free, "f0", lab.PodOptions{})

	// A dual-stack Service without selector whose endpoints are the external host's ports 80
	// and 443, over IPv4 and IPv6.
	kc := l.CP.Client(t)
	ip, ip6 := selectorlessService(t, l, free, "ext", []backendPort{{"http", corev1.ProtocolTCP, 80, 80}, {"https", corev1.ProtocolTCP, 8443, 443}},
		[]string{"203.0.113.10"}, []string{"2001:db8::10"})
	for _, n := range l.Nodes { // what kube-proxy would program
		script := fmt.Sprintf(`table inet labproxy {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %[1]s tcp dport 80 dnat ip to 203.0.113.10:80
		ip daddr %[1]s tcp dport 8443 dnat ip to 203.0.113.10:443
		ip6 daddr %[2]s tcp dport 80 dnat ip6 to [2001:db8::10]:80
		ip6 daddr %[2]s tcp dport 8443 dnat ip6 to [2001:db8::10]:443
	}
}`, ip, ip6)
		cmd := n.NS.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kube-proxy stand-in on %s: %v: %s", n.Name, err, out)
		}
	}
	svcHTTP, svcHTTPS := ip+":80", ip+":8443"
	svc6HTTP, svc6HTTPS := "["+ip6+"]:80", "["+ip6+"]:8443"
	checkReach(t, "no firewall", []reach{{a0, svcHTTP, false, lab.OK}, {a1, svcHTTP, false, lab.OK}, {a0, svc6HTTP, false, lab.OK}, {a1, svc6HTTP, false, lab.OK}})

	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.0/24}, ports: [{protocol: TCP, port: 443}]}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Allow, to: {cidrSelector: "2001:db8::/64"}, ports: [{protocol: TCP, port: 443}]}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)
	// On the routed node only the table sees this traffic (the classifier sees the cluster IP):
	// its drops count for the deny rule.
	waitBackendDenied(t, l.Nodes[0], a0.IPv4.String()+" . 203.0.113.10 . tcp . 80", a0.IPv6.String()+" . 2001:db8::10 . tcp . 80")
	series := `egressd_egressfirewall_rule_packets_total{action="Deny",namespace="` + ns + `",rule="1"}`
	before, _ := l.Nodes[0].Agent.Sample(series)
	checkReach(t, "enforced", []reach{{a0, svcHTTP, false, lab.Timeout}})
	if after, err := l.Nodes[0].Agent.Sample(series); err != nil || after == "" || after == before {
		t.Errorf("%s = %q before and %q after a dropped connection through the Service (%v)", series, before, after, err)
	}
	var cases []reach
	for _, p := range []*lab.Pod{a0, a1} {
		cases = append(cases,
			reach{p, svcHTTP, false, lab.Timeout}, // backend 203.0.113.10:80: denied
			reach{p, svcHTTPS, false, lab.OK},     // backend 203.0.113.10:443: allowed
			reach{p, "203.0.113.10:80", false, lab.Timeout},
			reach{p, svc6HTTP, false, lab.Timeout}, // [2001:db8::10]:80: denied
			reach{p, svc6HTTPS, false, lab.OK},     // [2001:db8::10]:443: allowed
		)
	}
	cases = append(cases, reach{f0, svcHTTP, false, lab.OK}, reach{f0, svc6HTTP, false, lab.OK}) // no firewall in its namespace
	checkReach(t, "enforced", cases)
	out, err := l.Nodes[0].NS.Run("nft", "list", "table", "inet", "egressd")
	if err != nil || !strings.Contains(out, a0.IPv4.String()+" . 203.0.113.10 . tcp . 80") {
		t.Errorf("nft list table inet egressd on node-0 lacks the pod's element (%v):\n%s", err, out)
	}

	// The endpoints go: nothing left to judge, the elements go (the table stays, shared by features).
	for _, name := range []string{"ext-4", "ext-6"} {
		if err := kc.DiscoveryV1().EndpointSlices(free).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, "node-0's backend deny elements gone after its backends went", 10*time.Second, func() error {
		out, err := l.Nodes[0].NS.Run("nft", "list", "table", "inet", "egressd")
		if err != nil {
			return err
		}
		if strings.Contains(out, "203.0.113.10 . tcp") || strings.Contains(out, "2001:db8::10 . tcp") {
			return fmt.Errorf("still there:\n%s", out)
		}
		return nil
	})
}

// TestPrivilegedEgressFirewallServiceBackendOnOwnNode: a Service whose endpoint is the pod's
// own node (a hostNetwork server, the API server seen from a control-plane node) is judged by
// that address after DNAT too. The connection is then delivered locally (the input hook), not
// forwarded. Each node's kube-proxy stand-in DNATs the cluster IP to the node's own address, as
// an internalTrafficPolicy: Local Service would; both CNI shapes. The Service's ports are the
// backends' (the node's observer names a flow by the ports it sniffs before DNAT).
func TestPrivilegedEgressFirewallServiceBackendOnOwnNode(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	for _, n := range l.Nodes {
		if err := n.Serve(8080, 8443); err != nil {
			t.Fatal(err)
		}
	}
	ns, free := l.CP.Namespace(t), l.CP.Namespace(t)
	a0, a1 := addPod(t, l.Nodes[0], ns, "a0", lab.PodOptions{}), addPod(t, l.Nodes[1], ns, "a1", lab.PodOptions{})
	f0 := addPod(t, l.Nodes[0], free, "f0", lab.PodOptions{})

	var v4, v6 []string
	for _, n := range l.Nodes {
		v4, v6 = append(v4, n.IPv4.String()), append(v6, n.IPv6.String())
	}
	ip, ip6 := selectorlessService(t, l, free, "host", []backendPort{{"http", corev1.ProtocolTCP, 8080, 8080}, {"https", corev1.ProtocolTCP, 8443, 8443}}, v4, v6)
	for _, n := range l.Nodes { // kube-proxy with internalTrafficPolicy: Local: the node's own endpoint
		if err := n.Nft(fmt.Sprintf(`table inet labproxy {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %[1]s tcp dport 8080 dnat ip to %[3]s:8080
		ip daddr %[1]s tcp dport 8443 dnat ip to %[3]s:8443
		ip6 daddr %[2]s tcp dport 8080 dnat ip6 to [%[4]s]:8080
		ip6 daddr %[2]s tcp dport 8443 dnat ip6 to [%[4]s]:8443
	}
}`, ip, ip6, n.IPv4, n.IPv6)); err != nil {
			t.Fatalf("kube-proxy stand-in on %s: %v", n.Name, err)
		}
	}
	svcHTTP, svcHTTPS := ip+":8080", ip+":8443"
	svc6HTTP, svc6HTTPS := "["+ip6+"]:8080", "["+ip6+"]:8443"
	checkReach(t, "no firewall", []reach{{a0, svcHTTP, false, lab.OK}, {a1, svcHTTP, false, lab.OK}, {a0, svc6HTTP, false, lab.OK}, {a1, svc6HTTP, false, lab.OK}})

	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 172.18.0.0/16}, ports: [{protocol: TCP, port: 8443}]}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Allow, to: {cidrSelector: "fc00:f853:ccd:e793::/64"}, ports: [{protocol: TCP, port: 8443}]}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)
	// On the routed node only the table sees this traffic, on the input hook: its drops count
	// for the deny rule.
	n0 := l.Nodes[0]
	waitBackendDenied(t, n0, a0.IPv4.String()+" . "+n0.IPv4.String()+" . tcp . 8080", a0.IPv6.String()+" . "+n0.IPv6.String()+" . tcp . 8080")
	series := `egressd_egressfirewall_rule_packets_total{action="Deny",namespace="` + ns + `",rule="1"}`
	before, _ := l.Nodes[0].Agent.Sample(series)
	checkReach(t, "enforced", []reach{{a0, svcHTTP, false, lab.Timeout}})
	if after, err := l.Nodes[0].Agent.Sample(series); err != nil || after == "" || after == before {
		t.Errorf("%s = %q before and %q after a dropped connection through the Service (%v)", series, before, after, err)
	}
	var cases []reach
	for _, p := range []*lab.Pod{a0, a1} {
		cases = append(cases,
			reach{p, svcHTTP, false, lab.Timeout}, // backend <own node>:8080: denied
			reach{p, svcHTTPS, false, lab.OK},     // backend <own node>:8443: allowed
			reach{p, svc6HTTP, false, lab.Timeout},
			reach{p, svc6HTTPS, false, lab.OK},
		)
	}
	cases = append(cases, reach{f0, svcHTTP, false, lab.OK}, reach{f0, svc6HTTP, false, lab.OK}) // no firewall in its namespace
	checkReach(t, "enforced", cases)
}

// TestPrivilegedEgressFirewallServiceAddresses: a pod under Deny 0.0.0.0/0 reaches a Service
// of the cluster through its load-balancer IP and its external IP, as through its cluster IP:
// kube-proxy DNATs them on the pod's node, and upstream's load balancers translate them before
// its ACLs, so the flow is judged by the backend (a pod: allowed; one outside: denied). On the
// routed node the classifier sees it before DNAT and lets through the Service's ports only; on
// the bridged one br_netfilter DNATs first. The addresses' other ports stay denied: the external
// IP is an outside host's address (any Service author picks those), and a load balancer may
// report a node's address (k3s' ServiceLB). A Service's port that kube-proxy does not translate
// (no endpoint) is rejected rather than let reach the address itself, forwarded or delivered to
// the pod's own node. A pod without firewall reaches all of them.
func TestPrivilegedEgressFirewallServiceAddresses(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	ctx := context.Background()
	if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10"); err != nil {
		t.Fatal(err)
	}
	if err := l.StartKubeProxy(ctx); err != nil {
		t.Fatal(err)
	}
	ns, free := l.CP.Namespace(t), l.CP.Namespace(t)
	a0, a1 := addPod(t, l.Nodes[0], ns, "a0", lab.PodOptions{}), addPod(t, l.Nodes[1], ns, "a1", lab.PodOptions{})
	f0 := addPod(t, l.Nodes[0], free, "f0", lab.PodOptions{})
	backend := addPod(t, l.Nodes[1], free, "backend", lab.PodOptions{})
	if err := backend.Serve(8080); err != nil {
		t.Fatal(err)
	}
	if err := l.Nodes[1].Serve(9090); err != nil {
		t.Fatal(err)
	}
	applyFirewall(t, l, ns, denyAll)
	node1 := l.Nodes[1].IPv4
	kc := l.CP.Client(t)
	// loadBalancer makes a Service of port port to the backends' target port, with these
	// external IPs, of type LoadBalancer with these ingress IPs.
	loadBalancer := func(name string, port, target int32, v4, v6, external []string, ingress ...string) {
		t.Helper()
		selectorlessService(t, l, free, name, []backendPort{{"p", corev1.ProtocolTCP, port, target}}, v4, v6)
		svc, err := kc.CoreV1().Services(free).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Spec.Type, svc.Spec.ExternalIPs = corev1.ServiceTypeLoadBalancer, external
		if svc, err = kc.CoreV1().Services(free).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, ip := range ingress {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		if _, err := kc.CoreV1().Services(free).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod4, pod6 := []string{backend.IPv4.String()}, []string{backend.IPv6.String()}
	web := []string{"203.0.113.10", "2001:db8::10"}
	loadBalancer("app", 80, 8080, pod4, pod6, web, "198.51.100.51", "2001:db8:50::51")
	loadBalancer("servicelb", 80, 8080, pod4, pod6, nil, node1.String()) // a load balancer that reports a node's address
	// A Service whose backend is outside (the web host), through its own external IP: judged by
	// the backend after DNAT, denied.
	loadBalancer("outside", 8443, 443, web[:1], web[1:], []string{"198.51.100.60", "2001:db8:60::60"})
	// Services without endpoint (no DNAT) on the web host's address and on node-0's: their ports
	// are frontends for the classifier, and the flows would reach the web host, or node-0's own
	// socket, unjudged.
	loadBalancer("unserved", 443, 443, nil, nil, web)
	loadBalancer("unserved-node", 9091, 9091, nil, nil, nil, l.Nodes[0].IPv4.String())
	if err := l.Nodes[0].Serve(9091); err != nil {
		t.Fatal(err)
	}
	// served: through a frontend, the backend pod answers (not the web host at the same address).
	served := func(p *lab.Pod, dst string) error {
		if r := p.TCP(dst, lab.ClientOptions{Timeout: quick}); r.Outcome != lab.OK || r.Seen.Host != free+"/backend" {
			return fmt.Errorf("%s/%s -> %s: %s, want the backend pod to answer", p.Namespace, p.Name, dst, r)
		}
		return nil
	}
	var cases []reach
	for _, p := range []*lab.Pod{a0, a1} {
		cases = append(cases,
			// The same addresses' other ports; the outside backend; the unserved Service's port.
			reach{p, "203.0.113.10:8080", false, lab.Timeout}, reach{p, "[2001:db8::10]:8080", false, lab.Timeout},
			reach{p, lab.HostPort(node1, 9090), false, lab.Timeout},
			reach{p, "198.51.100.60:8443", false, lab.Timeout}, reach{p, "[2001:db8:60::60]:8443", false, lab.Timeout},
			// The unserved Service's port on the web host is also the outside Service's backend:
			// denied as that, whether translated or not (kube-proxy would reject it after).
			reach{p, "203.0.113.10:443", false, lab.Timeout}, reach{p, "[2001:db8::10]:443", false, lab.Timeout},
			// Rejected, as kube-proxy rejects a Service without endpoint.
			reach{p, lab.HostPort(l.Nodes[0].IPv4, 9091), false, lab.Refused},
		)
	}
	// A pod without firewall reaches them all.
	cases = append(cases, reach{f0, "203.0.113.10:8080", false, lab.OK}, reach{f0, "[2001:db8::10]:8080", false, lab.OK},
		reach{f0, lab.HostPort(node1, 9090), false, lab.OK}, reach{f0, "198.51.100.60:8443", false, lab.OK},
		reach{f0, "203.0.113.10:443", false, lab.OK}, reach{f0, lab.HostPort(l.Nodes[0].IPv4, 9091), false, lab.OK})
	poll.Eventually(t, "the Services' addresses reach their backend pod, their other ports and backends are denied", 10*time.Second, func() error {
		for _, p := range []*lab.Pod{a0, a1} {
			for _, dst := range []string{"198.51.100.51:80", "[2001:db8:50::51]:80", "203.0.113.10:80", "[2001:db8::10]:80", lab.HostPort(node1, 80)} {
				if err := served(p, dst); err != nil {
					return err
				}
			}
		}
		for _, c := range cases {
			if err := c.check(); err != nil {
				return err
			}
		}
		return nil
	})
	dropped, err := l.Nodes[0].Agent.Sample("egressd_egressfirewall_frontend_drops_total")
	if n, _ := strconv.Atoi(dropped); err != nil || n == 0 {
		t.Errorf("egressd_egressfirewall_frontend_drops_total on %s: %q (%v), want the unserved Service's drops counted", l.Nodes[0].Name, dropped, err)
	}
}

// waitBackendDenied waits until n's table holds the deny elements (pod . backend . protocol .
// port) of its pods' connections through a Service: the firewall's status says its rules are
// applied, not that the agent has seen the Service's EndpointSlices yet.
func waitBackendDenied(t *testing.T, n *lab.Node, elements ...string) {
	t.Helper()
	poll.Eventually(t, "the backends' deny elements on "+n.Name, 10*time.Second, func() error {
		out, err := n.NS.Run("nft", "list", "table", "inet", "egressd")
		if err != nil {
			return err
		}
		for _, e := range elements {
			if !strings.Contains(out, e) {
				return fmt.Errorf("no element %s in:\n%s", e, out)
			}
		}
		return nil
	})
}
