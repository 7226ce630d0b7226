package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
	"github.com/egressd/egressd/watchers/dnsnames"
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

// TestPrivilegedEgressFirewallDNSNameAcrossRestart: the agent restarts while the DNS server is
// down: the new agent enforces the name's last addresses, kept by the old one, from its first
// sync, and a UDP stream to the name, allowed before any deny, flows on.
func TestPrivilegedEgressFirewallDNSNameAcrossRestart(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1, AgentArgs: []string{"--dns-server", "198.51.100.53:53"}})
	ctx := context.Background()
	d, err := l.AddDNS("dns", "198.51.100.53")
	if err != nil {
		t.Fatal(err)
	}
	d.Set("www.example.com", 1, "203.0.113.10")
	addExternals(t, l, []string{"web", "203.0.113.10"})
	if err := l.StartAgents(ctx); err != nil {
		t.Fatal(err)
	}
	n := l.Nodes[0]
	ns := l.CP.Namespace(t)
	p := addPod(t, n, ns, "p", lab.PodOptions{})
	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {dnsName: www.example.com}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}`)
	poll.Eventually(t, "the name's address allowed", 10*time.Second, reach{p, streamAllowed, false, lab.OK}.check)
	state := filepath.Join(filepath.Dir(n.CNISocket()), dnsnames.StateFile)
	poll.Eventually(t, "the name's address kept", 5*time.Second, func() error {
		b, err := os.ReadFile(state)
		if err != nil || !strings.Contains(string(b), "203.0.113.10") {
			return fmt.Errorf("%s: %q, %v", state, b, err)
		}
		return nil
	})

	s, err := p.StreamUDP(streamAllowed, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	d.Stop() // the DNS is down from here on: the name cannot resolve again
	n.Agent.Kill()
	if err := n.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	// The restarted agent's first sync is in force: a second of the stream from here on is
	// answered, though the name's 1 s TTL expired and asking again fails.
	_, from := s.Counts()
	poll.Eventually(t, "the stream flowing after the restart", 5*time.Second, func() error {
		if _, got := s.Counts(); got < from+100 {
			return fmt.Errorf("%d datagrams answered since the agent was ready, want a second's worth (100)", got-from)
		}
		return nil
	})
	sent, answered := s.Stop()
	t.Logf("stream across the restart: %d/%d answered", answered, sent)
}
