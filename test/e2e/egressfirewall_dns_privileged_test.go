package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressFirewallDNSName: a dnsName rule follows what the name resolves to (A and
// AAAA), in any letter case, and a changed answer takes over once the record's TTL expires.
func TestPrivilegedEgressFirewallDNSName(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1, AgentArgs: []string{"--dns-server", "198.51.100.53:53"}})
	ctx := context.Background()
	d, err := l.AddDNS("dns", "198.51.100.53")
	if err != nil {
		t.Fatal(err)
	}
	d.Set("www.example.com", 1, "203.0.113.10", "2001:db8::10")
	addExternals(t, l, []string{"web", "203.0.113.10", "2001:db8::10"}, []string{"other", "198.51.100.10", "2001:db8:1::10"})
	if err := l.StartAgents(ctx); err != nil {
		t.Fatal(err)
	}
	ns := l.CP.Namespace(t)
	p := addPod(t, l.Nodes[0], ns, "p", lab.PodOptions{})
	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {dnsName: WWW.Example.com}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)
	poll.Eventually(t, "the name's addresses allowed", 10*time.Second, reach{p, "203.0.113.10:80", false, lab.OK}.check)
	checkReach(t, "resolved", []reach{
		{p, "198.51.100.10:80", false, lab.Timeout},
		{p, "[2001:db8::10]:80", false, lab.OK}, // AAAA
		{p, "[2001:db8:1::10]:80", false, lab.Timeout},
	})

	d.Set("www.example.com", 1, "198.51.100.10", "2001:db8:1::10")
	start := time.Now()
	poll.Eventually(t, "the changed answer allowed", 15*time.Second, reach{p, "198.51.100.10:80", false, lab.OK}.check)
	t.Logf("changed answer enforced %s after the change (TTL 1 s)", time.Since(start).Round(time.Millisecond))
	checkReach(t, "re-resolved", []reach{
		{p, "203.0.113.10:80", false, lab.Timeout},
		{p, "[2001:db8:1::10]:80", false, lab.OK},
		{p, "[2001:db8::10]:80", false, lab.Timeout},
	})
}
