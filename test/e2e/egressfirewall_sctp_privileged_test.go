package e2e

import (
	"net/netip"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressFirewallSCTP: an SCTP port rule allows SCTP to that port and nothing else
// of that protocol, IPv4 and IPv6, on both CNI shapes; the same port over TCP stays denied.
// The pods send SCTP INITs on raw sockets (this kernel has no SCTP stack) and the external
// host's sniffer tells whether they arrived.
func TestPrivilegedEgressFirewallSCTP(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, Agents: true})
	web, err := l.AddExternal("web", lab.ExternalOptions{}, "203.0.113.10", "2001:db8::10")
	if err != nil {
		t.Fatal(err)
	}
	ns := l.CP.Namespace(t)
	pods := []*lab.Pod{addPod(t, l.Nodes[0], ns, "a0", lab.PodOptions{}), addPod(t, l.Nodes[1], ns, "a1", lab.PodOptions{})}
	dst := func(ip string, port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(ip), port) }
	check := func(step string, p *lab.Pod, to netip.AddrPort, want bool) {
		t.Helper()
		timeout := 2 * time.Second
		if !want {
			timeout = quick
		}
		got, err := p.SCTP(web, to, timeout)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: SCTP %s/%s (%s CNI) -> %s arrived=%v, want %v", step, p.Namespace, p.Name, p.Node.CNI, to, got, want)
		}
	}
	for _, p := range pods { // the probe works: both ports reach the host without a firewall
		check("no firewall", p, dst("203.0.113.10", 5001), true)
		check("no firewall", p, dst("2001:db8::10", 5001), true)
	}

	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 203.0.113.0/24}, ports: [{protocol: SCTP, port: 5000}]}
  - {type: Allow, to: {cidrSelector: "2001:db8::/64"}, ports: [{protocol: SCTP, port: 5000}]}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)
	for _, p := range pods {
		check("enforced", p, dst("203.0.113.10", 5000), true)
		check("enforced", p, dst("203.0.113.10", 5001), false)
		check("enforced", p, dst("2001:db8::10", 5000), true)
		check("enforced", p, dst("2001:db8::10", 5001), false)
	}
	var cases []reach
	for _, p := range pods { // the rule's port is for SCTP only
		cases = append(cases, reach{p, "203.0.113.10:5000", false, lab.Timeout}, reach{p, "[2001:db8::10]:5000", true, lab.Timeout})
	}
	checkReach(t, "enforced", cases)
}
