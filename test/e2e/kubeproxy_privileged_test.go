package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedKubeProxyModes: egressd judges a pod's traffic through a Service by the
// external backend kube-proxy DNATs it to, whichever kube-proxy programs the node: the lab's
// stand-in, and the real kube-proxy in iptables and in nftables mode (IPVS: the machines'
// kernels have no IP_VS). An EgressFirewall denies the backend's port 80 and allows 443 through
// the cluster IPs; an EgressQoS marks the Service's UDP to the backend with the backend's rule;
// IPv4 and IPv6, both CNI shapes; a pod of another namespace is untouched.
func TestPrivilegedKubeProxyModes(t *testing.T) {
	privileged.Require(t)
	for _, mode := range []string{"", "iptables", "nftables"} {
		name := mode
		if name == "" {
			name = "stand-in"
		}
		t.Run(name, func(t *testing.T) {
			l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true, KubeProxy: mode})
			if _, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10"); err != nil {
				t.Fatal(err)
			}
			if err := l.StartKubeProxy(context.Background()); err != nil {
				t.Fatal(err)
			}
			ns, free := l.CP.Namespace(t), l.CP.Namespace(t)
			a0, a1 := addPod(t, l.Nodes[0], ns, "a0", lab.PodOptions{}), addPod(t, l.Nodes[1], ns, "a1", lab.PodOptions{})
			f0 := addPod(t, l.Nodes[0], free, "f0", lab.PodOptions{})
			ip, ip6 := selectorlessService(t, l, free, "ext", []backendPort{
				{"http", corev1.ProtocolTCP, 80, 80}, {"https", corev1.ProtocolTCP, 8443, 443}, {"udp", corev1.ProtocolUDP, 80, 80},
			}, []string{"203.0.113.10"}, []string{"2001:db8::10"})
			svcHTTP, svcHTTPS := ip+":80", ip+":8443"
			svc6HTTP, svc6HTTPS := "["+ip6+"]:80", "["+ip6+"]:8443"
			poll.Eventually(t, "kube-proxy serves the Service", 20*time.Second, func() error {
				for _, c := range []reach{{a0, svcHTTP, false, lab.OK}, {a1, svcHTTP, false, lab.OK}, {a0, svc6HTTP, false, lab.OK}, {a1, svc6HTTP, false, lab.OK}} {
					if err := c.check(); err != nil {
						return err
					}
				}
				return nil
			})

			applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.0/24}, ports: [{protocol: TCP, port: 443}, {protocol: UDP, port: 80}]}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Allow, to: {cidrSelector: "2001:db8::/64"}, ports: [{protocol: TCP, port: 443}, {protocol: UDP, port: 80}]}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)
			waitBackendDenied(t, l.Nodes[0], a0.IPv4.String()+" . 203.0.113.10 . tcp . 80", a0.IPv6.String()+" . 2001:db8::10 . tcp . 80")
			var cases []reach
			for _, p := range []*lab.Pod{a0, a1} {
				cases = append(cases,
					reach{p, svcHTTP, false, lab.Timeout}, // backend 203.0.113.10:80: denied
					reach{p, svcHTTPS, false, lab.OK},     // backend 203.0.113.10:443: allowed
					reach{p, svc6HTTP, false, lab.Timeout},
					reach{p, svc6HTTPS, false, lab.OK},
				)
			}
			cases = append(cases, reach{f0, svcHTTP, false, lab.OK}, reach{f0, svc6HTTP, false, lab.OK}) // no firewall in its namespace
			checkReach(t, "enforced", cases)

			applyQoS(t, l, ns, `
  - {dscp: 46, dstCIDR: 203.0.113.0/24}
  - {dscp: 30, dstCIDR: "2001:db8::/48"}
  - {dscp: 10}`)
			for _, c := range []struct {
				p    *lab.Pod
				dst  string
				want int
			}{
				{a0, ip + ":80", 46}, // the backend's rule, not rule 2 (any), which covers the cluster IP
				{a1, ip + ":80", 46},
				{a0, "[" + ip6 + "]:80", 30},
				{a1, "[" + ip6 + "]:80", 30},
				{f0, ip + ":80", 0}, // no EgressQoS in its namespace
			} {
				poll.Eventually(t, "DSCP by the rule that covers the backend", 10*time.Second, dscpIs(c.p, c.dst, c.want))
			}
		})
	}
}
