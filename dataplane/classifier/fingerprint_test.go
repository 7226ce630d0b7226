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

// BenchmarkFingerprint: every sync fingerprints every namespace's rules to find the firewalls
// that changed (8000 rules: upstream's limit for one namespace).
func BenchmarkFingerprint(b *testing.B) {
	rules := fingerprintRules(8000)
	b.ReportAllocs()
	for b.Loop() {
		fingerprint(rules)
	}
}
