package classifier

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/egressd/egressd/dataplane"
)

func fingerprintRules(n int) []dataplane.FirewallRule {
	rules := make([]dataplane.FirewallRule, n)
	for i := range rules {
		rules[i] = dataplane.FirewallRule{Index: i, Deny: i%2 == 1, Text: fmt.Sprintf("Allow to 10.%d.%d.0/24 port TCP/443", i/256, i%256),
			Prefixes: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i / 256), byte(i % 256), 0}), 24)},
			Ports:    []dataplane.Port{{Protocol: 6, Port: 443}}}
	}
	return rules
}

// TestFingerprintTellsRulesApart: a change of any field of any rule changes the fingerprint;
// the same rules give the same one.
func TestFingerprintTellsRulesApart(t *testing.T) {
	base := fingerprint(fingerprintRules(20))
	if got := fingerprint(fingerprintRules(20)); got != base {
		t.Fatalf("the same rules: %#x then %#x", base, got)
	}
	for name, change := range map[string]func(r *dataplane.FirewallRule){
		"index":  func(r *dataplane.FirewallRule) { r.Index++ },
		"action": func(r *dataplane.FirewallRule) { r.Deny = !r.Deny },
		"text":   func(r *dataplane.FirewallRule) { r.Text = "D" + r.Text[1:] },
		"prefix": func(r *dataplane.FirewallRule) { r.Prefixes[0] = netip.MustParsePrefix("10.0.0.0/25") },
		"port":   func(r *dataplane.FirewallRule) { r.Ports[0].Port++ },
		"proto":  func(r *dataplane.FirewallRule) { r.Ports[0].Protocol = 17 },
		"ports":  func(r *dataplane.FirewallRule) { r.Ports = nil },
	} {
		rules := fingerprintRules(20)
		change(&rules[7])
		if fingerprint(rules) == base {
			t.Errorf("a changed %s of one rule keeps the fingerprint", name)
		}
	}
	if fingerprint(fingerprintRules(19)) == base {
		t.Error("one rule less keeps the fingerprint")
	}
}

// TestListFingerprintTellsFirewallsApart: the fingerprint of a list of firewalls changes with
// any field of any firewall (the classifier reuses what it computed from a list by it).
func TestListFingerprintTellsFirewallsApart(t *testing.T) {
	list := func() []dataplane.Firewall {
		var out []dataplane.Firewall
		for _, ns := range []string{"a", "b", "c"} {
			out = append(out, dataplane.Firewall{Origin: dataplane.Origin{Kind: "EgressFirewall", Namespace: ns, Name: "default"},
				Rules: fingerprintRules(5), Log: dataplane.ACLLog{Deny: "alert"}})
		}
		return out
	}
	base := listFingerprint(list())
	if got := listFingerprint(list()); got != base {
		t.Fatalf("the same list: %#x then %#x", base, got)
	}
	for name, change := range map[string]func(fws []dataplane.Firewall) []dataplane.Firewall{
		"namespace": func(fws []dataplane.Firewall) []dataplane.Firewall { fws[1].Origin.Namespace = "x"; return fws },
		"name":      func(fws []dataplane.Firewall) []dataplane.Firewall { fws[1].Origin.Name = "x"; return fws },
		"deny log":  func(fws []dataplane.Firewall) []dataplane.Firewall { fws[1].Log.Deny = ""; return fws },
		"allow log": func(fws []dataplane.Firewall) []dataplane.Firewall { fws[1].Log.Allow = "info"; return fws },
		"failure":   func(fws []dataplane.Firewall) []dataplane.Firewall { fws[1].Err = fmt.Errorf("bad"); return fws },
		"rule": func(fws []dataplane.Firewall) []dataplane.Firewall {
			fws[1].Rules[4].Deny = !fws[1].Rules[4].Deny
			return fws
		},
		"rules":    func(fws []dataplane.Firewall) []dataplane.Firewall { fws[1].Rules = fws[1].Rules[:4]; return fws },
		"order":    func(fws []dataplane.Firewall) []dataplane.Firewall { fws[0], fws[1] = fws[1], fws[0]; return fws },
		"one less": func(fws []dataplane.Firewall) []dataplane.Firewall { return fws[:2] },
	} {
		if listFingerprint(change(list())) == base {
			t.Errorf("a changed %s keeps the list's fingerprint", name)
		}
	}
}

// BenchmarkFingerprint: every sync fingerprints every namespace's rules to find the firewalls
// that changed (8000 rules: upstream's limit for one namespace).
func BenchmarkFingerprint(b *testing.B) {
	rules := fingerprintRules(8000)
	b.ReportAllocs()
	for b.Loop() {
		fingerprint(rules)
	}
}
