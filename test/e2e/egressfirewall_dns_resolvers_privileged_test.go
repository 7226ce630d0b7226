package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressFirewallDNSResolvers: dnsName rules as upstream's resolver or better. The
// nameservers of the configuration are asked in order: the second is not asked while the
// first answers. A TTL of 0 is refreshed every 5 s, a TTL of 1 s every second (only 0 is
// floored). An alias is refreshed when the shortest TTL of its CNAME chain expires, so a
// changed target address is enforced within that TTL. When the first server is down, the
// second answers and its addresses are enforced.
func TestPrivilegedEgressFirewallDNSResolvers(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 1, AgentArgs: []string{"--dns-server", "198.51.100.52:53,198.51.100.53:53"}})
	ctx := context.Background()
	first, err := l.AddDNS("dns1", "198.51.100.52")
	if err != nil {
		t.Fatal(err)
	}
	second, err := l.AddDNS("dns2", "198.51.100.53")
	if err != nil {
		t.Fatal(err)
	}
	// The two servers disagree on www, so that the addresses allowed tell which one answered.
	first.Set("www.example.com", 1, "203.0.113.10", "2001:db8::10")
	second.Set("www.example.com", 1, "198.51.100.10", "2001:db8:1::10")
	for _, d := range []*lab.DNS{first, second} {
		d.Set("zero.example.com", 0, "192.0.2.20")
		d.Set("one.example.com", 1, "192.0.2.21")
		d.SetCNAME("alias.example.com", 1, "target.example.com")
		d.Set("target.example.com", 300, "192.0.2.30")
	}
	addExternals(t, l, []string{"web", "203.0.113.10", "2001:db8::10"}, []string{"other", "198.51.100.10", "2001:db8:1::10"},
		[]string{"api", "192.0.2.40"})
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
  - {type: Allow, to: {dnsName: www.example.com}}
  - {type: Allow, to: {dnsName: alias.example.com}}
  - {type: Allow, to: {dnsName: zero.example.com}}
  - {type: Allow, to: {dnsName: one.example.com}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)

	// In order: the first server answers, the second is never asked.
	poll.Eventually(t, "the first server's addresses allowed", 10*time.Second, reach{p, "203.0.113.10:80", false, lab.OK}.check)
	checkReach(t, "first server answering", []reach{
		{p, "[2001:db8::10]:80", false, lab.OK},
		{p, "198.51.100.10:80", false, lab.Timeout},
		{p, "[2001:db8:1::10]:80", false, lab.Timeout},
	})
	if n := second.Queries("www.example.com"); n != 0 {
		t.Errorf("the second server was asked %d times while the first answered", n)
	}

	// Refreshes per name over 10 s, one A and one AAAA question each.
	z0, o0, a0 := first.Queries("zero.example.com"), first.Queries("one.example.com"), first.Queries("alias.example.com")
	const window = 10 * time.Second
	time.Sleep(window)
	zero := (first.Queries("zero.example.com") - z0) / 2
	one := (first.Queries("one.example.com") - o0) / 2
	alias := (first.Queries("alias.example.com") - a0) / 2
	t.Logf("refreshes in %s: TTL 0: %d, TTL 1: %d, CNAME TTL 1 over A TTL 300: %d", window, zero, one, alias)
	if zero < 1 || zero > 3 {
		t.Errorf("TTL 0: %d refreshes in %s, want 2 (every 5 s)", zero, window)
	}
	if one < 5 || one > 11 {
		t.Errorf("TTL 1 s: %d refreshes in %s, want about 10 (the record's TTL, not floored)", one, window)
	}
	if alias < 5 || alias > 11 {
		t.Errorf("CNAME TTL 1 s over A TTL 300 s: %d refreshes in %s, want about 10 (the chain's smallest TTL)", alias, window)
	}

	// The alias's target moves to api: allowed within about the CNAME's TTL, not the A record's.
	if err := (reach{p, "192.0.2.40:80", false, lab.Timeout}).check(); err != nil {
		t.Fatal(err)
	}
	first.Set("target.example.com", 300, "192.0.2.40")
	start := time.Now()
	poll.Eventually(t, "the alias's new target allowed", 10*time.Second, reach{p, "192.0.2.40:80", false, lab.OK}.check)
	t.Logf("alias's new target enforced %s after the change (CNAME TTL 1 s, A TTL 300 s)", time.Since(start).Round(time.Millisecond))
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the alias's new target took %s, want about its CNAME's 1 s TTL", d.Round(time.Millisecond))
	}

	// The first server goes down: the second answers, its addresses replace the first's. (Each
	// question now costs the first server's timeout, since the host's ICMP errors are rate
	// limited: the switch takes up to two of them.)
	first.Stop()
	start = time.Now()
	poll.Eventually(t, "the second server's addresses allowed", 20*time.Second, reach{p, "198.51.100.10:80", false, lab.OK}.check)
	t.Logf("second server's answer enforced %s after the first went down", time.Since(start).Round(time.Millisecond))
	checkReach(t, "first server down", []reach{
		{p, "[2001:db8:1::10]:80", false, lab.OK},
		{p, "203.0.113.10:80", false, lab.Timeout},
		{p, "[2001:db8::10]:80", false, lab.Timeout},
	})
}
