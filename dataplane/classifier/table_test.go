package classifier

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/egressd/egressd/dataplane"
)

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

// longest is the value of the longest prefix of dst in t, as an LPM trie answers.
func longest[V any](t func(netip.Prefix) (V, bool), dst netip.Addr) (V, bool) {
	for bits := dst.BitLen(); bits >= 0; bits-- {
		p, _ := dst.Prefix(bits)
		if v, ok := t(p); ok {
			return v, true
		}
	}
	var zero V
	return zero, false
}

// lookup is what the classifier does with the tables: the longest prefix's entry, then, when a
// rule with ports comes first and the packet has a port, the longest prefix for its (protocol,
// port); the earlier rule decides.
func lookup(entries map[netip.Prefix]Entry, ports map[PortPrefix]Decision, dst netip.Addr, proto uint8, port uint16) Decision {
	e, ok := longest(func(p netip.Prefix) (Entry, bool) { v, ok := entries[p]; return v, ok }, dst)
	if !ok {
		return noDecision
	}
	d := e.Portless
	if e.PortsFirst && port != 0 {
		pt := dataplane.Port{Protocol: proto, Port: port}
		if pd, ok := longest(func(p netip.Prefix) (Decision, bool) { v, ok := ports[PortPrefix{pt, p}]; return v, ok }, dst); ok && (d.Index < 0 || pd.Index < d.Index) {
			d = pd
		}
	}
	return d
}

func TestTableOrderAndOverlap(t *testing.T) {
	https := []dataplane.Port{{Protocol: 6, Port: 443}}
	rules := []Rule{
		{Index: 0, Prefixes: pfx("10.1.0.0/16"), Ports: https},
		{Index: 1, Deny: true, Prefixes: pfx("10.0.0.0/8")},
		{Index: 2, Prefixes: pfx("10.1.2.0/24")}, // shadowed by rule 1 except where rule 0's ports match
		{Index: 3, Deny: true, Prefixes: pfx("0.0.0.0/0", "::/0")},
		{Index: 4, Prefixes: pfx("2001:db8::/32", "10.9.9.9/32"), Ports: https},
	}
	entries, ports := Table(rules)
	want := map[string]Entry{
		"10.1.0.0/16":   {Decision{1, true}, true},
		"10.0.0.0/8":    {Decision{1, true}, false},
		"10.1.2.0/24":   {Decision{1, true}, true},
		"0.0.0.0/0":     {Decision{3, true}, false},
		"::/0":          {Decision{3, true}, false},
		"2001:db8::/32": {Decision{3, true}, false}, // rule 4 comes after rule 3
		"10.9.9.9/32":   {Decision{1, true}, false},
	}
	if len(entries) != len(want) {
		t.Errorf("%d entries, want %d: %v", len(entries), len(want), entries)
	}
	for p, e := range want {
		if got := entries[netip.MustParsePrefix(p)]; got != e {
			t.Errorf("%s: %+v, want %+v", p, got, e)
		}
	}
	// One ports entry per prefix of a rule with ports (and per port): rule 0's and rule 4's.
	if len(ports) != 3 {
		t.Errorf("%d ports entries, want 3: %v", len(ports), ports)
	}
	if d := lookup(entries, ports, netip.MustParseAddr("10.1.2.3"), 6, 443); d != (Decision{0, false}) {
		t.Errorf("10.1.2.3 tcp/443: %+v, want rule 0", d)
	}
	if d := lookup(entries, ports, netip.MustParseAddr("10.1.2.3"), 17, 443); d != (Decision{1, true}) {
		t.Errorf("10.1.2.3 udp/443: %+v, want rule 1", d)
	}
}

func TestTableHostBitsAndDuplicates(t *testing.T) {
	entries, ports := Table([]Rule{
		{Index: 0, Deny: true, Prefixes: pfx("10.1.2.3/8", "10.0.0.0/8")},
		{Index: 1, Prefixes: pfx("10.0.0.0/8")},
	})
	if e := entries[netip.MustParsePrefix("10.0.0.0/8")]; len(entries) != 1 || len(ports) != 0 || e != (Entry{Decision{0, true}, false}) {
		t.Errorf("got %v %v", entries, ports)
	}
}

// TestTableManyOverlappingPortRules: users write one rule per port ("Allow 0.0.0.0/0 TCP 443",
// "... TCP 8443", ... up to upstream's 8000 rules), over other rules' prefixes: there is no
// limit, and the tables grow with the rules, not with their overlaps.
func TestTableManyOverlappingPortRules(t *testing.T) {
	var rules []Rule
	for i := range 4000 {
		rules = append(rules, Rule{Index: i, Prefixes: pfx("0.0.0.0/0"), Ports: []dataplane.Port{{Protocol: 6, Port: uint16(1 + i)}}})
	}
	for i := range 3999 {
		rules = append(rules, Rule{Index: 4000 + i, Prefixes: pfx(fmt.Sprintf("192.0.%d.%d/32", i/250, i%250))})
	}
	rules = append(rules, Rule{Index: 7999, Deny: true, Prefixes: pfx("0.0.0.0/0")})
	entries, ports := Table(rules)
	if len(entries) != 4000 || len(ports) != 4000 {
		t.Errorf("%d entries and %d ports entries, want 4000 and 4000", len(entries), len(ports))
	}
	for _, tc := range []struct {
		dst  string
		port uint16
		want Decision
	}{
		{"192.0.1.7", 4000, Decision{3999, false}},
		{"192.0.1.7", 4001, Decision{4257, false}},
		{"203.0.113.1", 1, Decision{0, false}},
		{"203.0.113.1", 4001, Decision{7999, true}},
	} {
		if d := lookup(entries, ports, netip.MustParseAddr(tc.dst), 6, tc.port); d != tc.want {
			t.Errorf("%s tcp/%d: %+v, want %+v", tc.dst, tc.port, d, tc.want)
		}
	}
}

// RandomFirewall is a random rule set over nested v4 and v6 prefixes, with ports and actions
// drawn so that rules overlap, and Dst a random destination among them.
type randomFirewall struct{ r *rand.Rand }

func (g randomFirewall) prefix() netip.Prefix {
	r := g.r
	switch r.IntN(8) {
	case 0:
		return netip.MustParsePrefix("0.0.0.0/0")
	case 1:
		a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(r.IntN(4)), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(r.IntN(4))})
		return netip.PrefixFrom(a, []int{0, 32, 40, 64, 128}[r.IntN(5)]).Masked()
	}
	a := netip.AddrFrom4([4]byte{192, byte(r.IntN(3)), byte(r.IntN(4)), byte(r.IntN(4))})
	return netip.PrefixFrom(a, 8+r.IntN(25)).Masked()
}

func (g randomFirewall) rules() []dataplane.FirewallRule {
	r := g.r
	var rules []dataplane.FirewallRule
	for i := range 1 + r.IntN(40) {
		rule := dataplane.FirewallRule{Index: i, Deny: r.IntN(2) == 0, Text: fmt.Sprint("rule ", i)}
		for range 1 + r.IntN(3) {
			rule.Prefixes = append(rule.Prefixes, g.prefix())
		}
		if r.IntN(2) == 0 {
			for range 1 + r.IntN(3) {
				rule.Ports = append(rule.Ports, g.port())
			}
		}
		rules = append(rules, rule)
	}
	return rules
}

func (g randomFirewall) port() dataplane.Port {
	return dataplane.Port{Protocol: []uint8{6, 17, 132}[g.r.IntN(3)], Port: uint16(1 + g.r.IntN(4))}
}

func (g randomFirewall) dst() netip.Addr {
	a := g.prefix().Addr()
	if a.Is4() {
		b := a.As4()
		b[3] = byte(g.r.IntN(4))
		if b[0] == 0 {
			b[0] = 192
		}
		return netip.AddrFrom4(b)
	}
	b := a.As16()
	b[15] = byte(g.r.IntN(4))
	return netip.AddrFrom16(b)
}

// Against the reference (dataplane.FirstMatch) on random rule sets and packets, v4 and v6.
func TestTableMatchesFirstMatch(t *testing.T) {
	g := randomFirewall{rand.New(rand.NewPCG(7, 9))}
	for round := range 500 {
		rules := g.rules()
		trs := make([]Rule, len(rules))
		for i, r := range rules {
			trs[i] = Rule{Index: r.Index, Deny: r.Deny, Prefixes: r.Prefixes, Ports: r.Ports}
		}
		entries, ports := Table(trs)
		for range 200 {
			dst, pt := g.dst(), g.port()
			if g.r.IntN(8) == 0 {
				pt = dataplane.Port{Protocol: 1} // ICMP: no port
			}
			want := noDecision
			if r, ok := dataplane.FirstMatch(rules, dst, pt.Protocol, pt.Port); ok {
				want = Decision{r.Index, r.Deny}
			}
			if got := lookup(entries, ports, dst, pt.Protocol, pt.Port); got != want {
				t.Fatalf("round %d dst %s %v: tables say %+v, first match is %+v\nrules %+v", round, dst, pt, got, want, rules)
			}
		}
	}
}

func BenchmarkTable8000(b *testing.B) {
	var rules []Rule
	for i := range 8000 {
		r := Rule{Index: i, Deny: i%2 == 0, Prefixes: pfx(fmt.Sprintf("10.%d.%d.0/24", i/250, i%250))}
		if i%5 == 0 {
			r.Ports = []dataplane.Port{{Protocol: 6, Port: 443}}
		}
		rules = append(rules, r)
	}
	rules = append(rules, Rule{Index: 8000, Deny: true, Prefixes: pfx("0.0.0.0/0")})
	for b.Loop() {
		Table(rules)
	}
}
