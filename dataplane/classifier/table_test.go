package classifier

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

// firstMatch is the reference semantics: rules in order, the first containing dst whose ports
// match decides.
func firstMatch(rules []Rule, dst netip.Addr, portMatches func(Rule) bool) (int, bool) {
	for _, r := range rules {
		for _, p := range r.Prefixes {
			if p.Contains(dst) && (!r.HasPorts || portMatches(r)) {
				return r.Index, true
			}
		}
	}
	return -1, false
}

// lookup is what the classifier does: longest prefix, then candidates in order.
func lookup(t map[netip.Prefix][]Candidate, dst netip.Addr, portMatches func(Candidate) bool) (int, bool) {
	for bits := dst.BitLen(); bits >= 0; bits-- {
		p, _ := dst.Prefix(bits)
		if cs, ok := t[p]; ok {
			for _, c := range cs {
				if !c.HasPorts || portMatches(c) {
					return c.Index, true
				}
			}
			return -1, false
		}
	}
	return -1, false
}

func TestTableOrderAndOverlap(t *testing.T) {
	rules := []Rule{
		{Index: 0, Prefixes: pfx("10.1.0.0/16"), HasPorts: true},
		{Index: 1, Deny: true, Prefixes: pfx("10.0.0.0/8")},
		{Index: 2, Prefixes: pfx("10.1.2.0/24")}, // shadowed by rule 1 except where rule 0's ports match
		{Index: 3, Deny: true, Prefixes: pfx("0.0.0.0/0", "::/0")},
		{Index: 4, Prefixes: pfx("2001:db8::/32", "10.9.9.9/32")},
	}
	got, err := Table(rules)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{
		"10.1.0.0/16":   {0, 1},
		"10.0.0.0/8":    {1},
		"10.1.2.0/24":   {0, 1},
		"0.0.0.0/0":     {3},
		"::/0":          {3},
		"2001:db8::/32": {3},
		"10.9.9.9/32":   {1},
	}
	if len(got) != len(want) {
		t.Errorf("%d entries, want %d: %v", len(got), len(want), got)
	}
	for p, idx := range want {
		var have []int
		for _, c := range got[netip.MustParsePrefix(p)] {
			have = append(have, c.Index)
		}
		if !slices.Equal(have, idx) {
			t.Errorf("%s: candidates %v, want %v", p, have, idx)
		}
	}
}

func TestTableHostBitsAndDuplicates(t *testing.T) {
	got, err := Table([]Rule{
		{Index: 0, Deny: true, Prefixes: pfx("10.1.2.3/8", "10.0.0.0/8")},
		{Index: 1, Prefixes: pfx("10.0.0.0/8")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cs := got[netip.MustParsePrefix("10.0.0.0/8")]; len(got) != 1 || len(cs) != 1 || cs[0].Index != 0 || !cs[0].Deny {
		t.Errorf("got %v", got)
	}
}

func TestTableTooManyOverlappingPortRules(t *testing.T) {
	var rules []Rule
	for i := range MaxCandidates + 1 {
		rules = append(rules, Rule{Index: i, Prefixes: pfx(fmt.Sprintf("10.0.0.0/%d", 8+i%16)), HasPorts: true})
	}
	if _, err := Table(rules); err == nil {
		t.Fatal("accepted more overlapping port rules than the classifier can try")
	}
	rules[0].HasPorts = false // a portless outermost rule first: every list stops at it
	rules[0].Prefixes = pfx("0.0.0.0/0")
	if _, err := Table(rules); err != nil {
		t.Fatal(err)
	}
}

// Against the reference semantics on random rule sets and destinations, v4 and v6.
func TestTableMatchesFirstMatchSemantics(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	randPrefix := func() netip.Prefix {
		if r.IntN(4) == 0 {
			a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(r.IntN(4))})
			return netip.PrefixFrom(a, 32+r.IntN(12)).Masked()
		}
		a := netip.AddrFrom4([4]byte{10, byte(r.IntN(4)), byte(r.IntN(4)), byte(r.IntN(4))})
		return netip.PrefixFrom(a, 8+r.IntN(25)).Masked()
	}
	for round := range 300 {
		var rules []Rule
		for i := range 1 + r.IntN(30) {
			rule := Rule{Index: i, Deny: r.IntN(2) == 0, HasPorts: r.IntN(3) == 0}
			for range 1 + r.IntN(3) {
				rule.Prefixes = append(rule.Prefixes, randPrefix())
			}
			rules = append(rules, rule)
		}
		table, err := Table(rules)
		if err != nil {
			t.Fatal(err)
		}
		portOK := map[int]bool{}
		for _, rule := range rules {
			portOK[rule.Index] = r.IntN(2) == 0
		}
		for range 200 {
			dst := randPrefix().Addr()
			if r.IntN(2) == 0 && dst.Is4() {
				b := dst.As4()
				b[3] = byte(r.IntN(4))
				dst = netip.AddrFrom4(b)
			}
			wi, wok := firstMatch(rules, dst, func(x Rule) bool { return portOK[x.Index] })
			gi, gok := lookup(table, dst, func(c Candidate) bool { return portOK[c.Index] })
			if wi != gi || wok != gok {
				t.Fatalf("round %d dst %s: table says %d/%v, first match is %d/%v\nrules %+v", round, dst, gi, gok, wi, wok, rules)
			}
		}
	}
}

func BenchmarkTable8000(b *testing.B) {
	var rules []Rule
	for i := range 8000 {
		rules = append(rules, Rule{Index: i, Deny: i%2 == 0, Prefixes: pfx(fmt.Sprintf("10.%d.%d.0/24", i/250, i%250)), HasPorts: i%5 == 0})
	}
	rules = append(rules, Rule{Index: 8000, Deny: true, Prefixes: pfx("0.0.0.0/0")})
	for b.Loop() {
		if _, err := Table(rules); err != nil {
			b.Fatal(err)
		}
	}
}
