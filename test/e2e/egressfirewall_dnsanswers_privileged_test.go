package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/test/lab"
	"github.com/egressd/egressd/test/poll"
	"github.com/egressd/egressd/test/privileged"
)

// TestPrivilegedEgressFirewallDNSAnswers: a dnsName rule allows what the pod was answered. The
// DNS server rotates its answers (each query gets the next of 16 addresses per family, as object
// stores and CDNs answer a moment apart), so the agent's own resolution knows one address of 16
// at a time: each of 100 lookups (A and AAAA, UDP and TCP) is followed by a connection to the
// address answered, which must succeed at once, on both CNI shapes. A wildcard rule lets three
// of its subdomains through at their first connection after their lookup, not a name two labels
// deeper; a name no rule allows stays denied though the pod resolved it; and an answer from a
// DNS server that is not a trusted resolver (one the pod may reach, as it may any pod of the
// cluster) teaches nothing.
func TestPrivilegedEgressFirewallDNSAnswers(t *testing.T) {
	privileged.Require(t)
	l := lab.New(t, lab.Options{Nodes: 2, CNI: map[int]lab.CNI{1: lab.Bridged}, AgentArgs: []string{"--dns-server", "198.51.100.53:53"}})
	ctx := context.Background()
	d, err := l.AddDNS("dns", "198.51.100.53")
	if err != nil {
		t.Fatal(err)
	}
	web := []string{"web"}
	var pool []string
	for i := range 16 {
		pool = append(pool, fmt.Sprintf("203.0.113.%d", 100+i), fmt.Sprintf("2001:db8::%x", 0x100+i))
	}
	d.SetRotating("s3.example.com", 60, pool...)
	web = append(web, pool...)
	for i, name := range []string{"a.wild.example.com", "b.wild.example.com", "c.wild.example.com", "x.y.wild.example.com", "other.example.com"} {
		v4, v6 := fmt.Sprintf("203.0.113.%d", 201+i), fmt.Sprintf("2001:db8::%x", 0x201+i)
		d.Set(name, 60, v4, v6)
		web = append(web, v4, v6)
	}
	rogue, err := l.AddDNS("rogue", "198.51.100.99")
	if err != nil {
		t.Fatal(err)
	}
	rogue.Set("s3.example.com", 60, "203.0.113.250", "2001:db8::250")
	web = append(web, "203.0.113.250", "2001:db8::250")
	addExternals(t, l, web)
	if err := l.StartAgents(ctx); err != nil {
		t.Fatal(err)
	}
	ns := l.CP.Namespace(t)
	applyFirewall(t, l, ns, `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 198.51.100.0/24}, ports: [{protocol: UDP, port: 53}, {protocol: TCP, port: 53}]}
  - {type: Allow, to: {dnsName: s3.example.com}}
  - {type: Allow, to: {dnsName: "*.wild.example.com"}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
  - {type: Deny, to: {cidrSelector: "::/0"}}`)
	server := netip.MustParseAddr("198.51.100.53")
	// lookupThenConnect resolves name from the pod and connects once to the first address.
	lookupThenConnect := func(p *lab.Pod, network, name string, qtype uint16) (netip.Addr, error) {
		ips, _, err := p.LookupOver(network, server, name, qtype)
		if err != nil || len(ips) == 0 {
			return netip.Addr{}, fmt.Errorf("%s looks up %s over %s: %v (%d addresses)", p.Name, name, network, err, len(ips))
		}
		return ips[0], reach{p, netip.AddrPortFrom(ips[0], 80).String(), false, lab.OK}.check()
	}
	for i, n := range l.Nodes {
		p := addPod(t, n, ns, "p"+strconv.Itoa(i), lab.PodOptions{})
		seen := map[netip.Addr]bool{}
		failures := 0
		for j := range 100 {
			network, qtype := "udp", dns.TypeA
			if j%4 == 3 {
				network = "tcp"
			}
			if j%2 == 1 {
				qtype = dns.TypeAAAA
			}
			ip, err := lookupThenConnect(p, network, "s3.example.com", qtype)
			if err != nil {
				failures++
				if failures <= 3 {
					t.Errorf("lookup %d (%s CNI): %v", j, n.CNI, err)
				}
			}
			seen[ip] = true
		}
		if failures > 0 || len(seen) < 32 {
			t.Errorf("%s (%s CNI): %d of 100 connections after a lookup failed; %d distinct addresses answered, want 32", p.Name, n.CNI, failures, len(seen))
		}
		for _, name := range []string{"a.wild.example.com", "b.wild.example.com", "c.wild.example.com"} {
			for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
				if _, err := lookupThenConnect(p, "udp", name, qtype); err != nil {
					t.Errorf("wildcard (%s CNI): %v", n.CNI, err)
				}
			}
		}
		// egressctl shows the wildcard's rule with what it learned, by the name answered (the
		// agent writes its file at most a second after a change).
		poll.Eventually(t, "egressctl dns shows the wildcard's learned addresses", 5*time.Second, func() error {
			out, err := n.NS.Run(egressctl(t), "dns", "--bpf-pin-root", lab.PinRoot(l.ID, n.Name), "--cni-socket", n.CNISocket())
			for _, want := range []string{"*.wild.example.com  " + ns + "#2", "a.wild.example.com 203.0.113.201 (", "s3.example.com"} {
				if err != nil || !strings.Contains(out, want) {
					return fmt.Errorf("no %q in (%v):\n%s", want, err, out)
				}
			}
			return nil
		})
		for _, name := range []string{"x.y.wild.example.com", "other.example.com"} {
			ips, _, err := p.Lookup(server, name, dns.TypeA)
			if err != nil || len(ips) == 0 {
				t.Fatalf("%s looks up %s: %v", p.Name, name, err)
			}
			checkReach(t, "a name no rule allows", []reach{{p, netip.AddrPortFrom(ips[0], 80).String(), false, lab.Timeout}})
		}
		for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
			ips, _, err := p.Lookup(rogue.Addr, "s3.example.com", qtype)
			if err != nil || len(ips) == 0 {
				t.Fatalf("%s looks up s3.example.com at the rogue server: %v", p.Name, err)
			}
			checkReach(t, "an answer from a server not trusted", []reach{{p, netip.AddrPortFrom(ips[0], 80).String(), false, lab.Timeout}})
		}
		if v, err := n.Agent.Sample(`egressd_dns_answers_total{result="learned"}`); err != nil || v == "" || v == "0" {
			t.Errorf("node %s: egressd_dns_answers_total{result=\"learned\"} = %q (%v), want > 0", n.Name, v, err)
		}
	}
}

// TestPrivilegedEgressFirewallDNSLearnCap: the answers to one namespace's pods teach at most
// --dns-learned-per-namespace addresses. Past it, an answer's new address stays denied, the
// namespace's EgressFirewall entry of the node says why (the aggregate status stays applied),
// with a Warning Event and egressd_dns_learned_capped_namespaces; another namespace's pods,
// asking the same name, still learn.
func TestPrivilegedEgressFirewallDNSLearnCap(t *testing.T) {
	privileged.Require(t)
	const capped = 4
	l := lab.New(t, lab.Options{Nodes: 1, AgentArgs: []string{"--dns-server", "198.51.100.53:53", "--dns-learned-per-namespace", strconv.Itoa(capped)}})
	ctx := context.Background()
	d, err := l.AddDNS("dns", "198.51.100.53")
	if err != nil {
		t.Fatal(err)
	}
	var pool []string
	for i := range 16 {
		pool = append(pool, fmt.Sprintf("203.0.113.%d", 100+i))
	}
	d.SetRotating("s3.example.com", 300, pool...)
	addExternals(t, l, append([]string{"web"}, pool...))
	if err := l.StartAgents(ctx); err != nil {
		t.Fatal(err)
	}
	server := netip.MustParseAddr("198.51.100.53")
	firewall := `
apiVersion: k8s.ovn.org/v1
kind: EgressFirewall
metadata: {name: default}
spec:
  egress:
  - {type: Allow, to: {cidrSelector: 198.51.100.0/24}, ports: [{protocol: UDP, port: 53}]}
  - {type: Allow, to: {dnsName: s3.example.com}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}`
	a, b := l.CP.Namespace(t), l.CP.Namespace(t)
	applyFirewall(t, l, a, firewall)
	applyFirewall(t, l, b, firewall)
	n := l.Nodes[0]
	pa, pb := addPod(t, n, a, "pa", lab.PodOptions{}), addPod(t, n, b, "pb", lab.PodOptions{})
	lookup := func(p *lab.Pod) string {
		t.Helper()
		ips, _, err := p.Lookup(server, "s3.example.com", dns.TypeA)
		if err != nil || len(ips) == 0 {
			t.Fatalf("%s looks up s3.example.com: %v", p.Name, err)
		}
		return netip.AddrPortFrom(ips[0], 80).String()
	}
	for range capped {
		checkReach(t, "an answer within the cap", []reach{{pa, lookup(pa), false, lab.OK}})
	}
	checkReach(t, "an answer past the namespace's cap", []reach{{pa, lookup(pa), false, lab.Timeout}})
	note := fmt.Sprintf("%s: %s; DNS answers to its pods are not learned: the namespace keeps %d learned addresses, its cap, until some expire", n.Name, fwApplied, capped)
	waitFirewallMessage(t, l, a, note)
	if err := l.Kube.WaitField(ctx, "k8s.ovn.org/v1", "EgressFirewall", a, "default", "status.status", fwApplied, 10*time.Second); err != nil {
		t.Error(err)
	}
	waitEventFor(t, l.Client, a, "involvedObject.name=default", "the cap's Warning Event", func(e corev1.Event) bool {
		return e.Type == "Warning" && e.Reason == "EgressFirewallNote" && strings.Contains(e.Message, "are not learned")
	})
	if v, err := n.Agent.Sample(`egressd_dns_learned_capped_namespaces`); err != nil || v != "1" {
		t.Errorf("egressd_dns_learned_capped_namespaces = %q (%v), want 1", v, err)
	}
	checkReach(t, "another namespace's answer", []reach{{pb, lookup(pb), false, lab.OK}})
	waitFirewallMessage(t, l, b, n.Name+": "+fwApplied)
}
