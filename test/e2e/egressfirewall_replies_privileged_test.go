package e2e

import (
	"testing"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressFirewallRepliesNotTCPOrUDP: under Deny 0.0.0.0/0 and ::/0, a pod still
// answers pings from outside (the firewall judges only the flows a pod starts, as upstream),
// IPv4 and IPv6, on both CNI shapes; its own pings out stay denied.
func TestPrivilegedEgressFirewallRepliesNotTCPOrUDP(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	web, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10")
	if err != nil {
		t.Fatal(err)
	}
	ns := l.CP.Namespace(t)
	pods := []*lab.Pod{addPod(t, l.Nodes[0], ns, "routed", lab.PodOptions{}), addPod(t, l.Nodes[1], ns, "bridged", lab.PodOptions{})}
	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)
	for _, p := range pods {
		for _, dst := range []string{p.IPv4.String(), p.IPv6.String()} {
			if out, err := web.NS.Run("ping", "-c", "2", "-i", "0.2", "-W", "2", dst); err != nil {
				t.Errorf("%s (%s CNI): ping from outside to %s unanswered under deny-all: %v\n%s", p.Name, p.Node.CNI, dst, err, out)
			}
		}
		for _, dst := range []string{"203.0.113.10", "2001:db8::10"} {
			if err := p.Ping(dst); err == nil {
				t.Errorf("%s (%s CNI): its own ping to %s got through deny-all", p.Name, p.Node.CNI, dst)
			}
		}
	}
}
