package classifier_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
)

// TestPrivilegedClassifierMatchesFirstMatch is the differential test of the program against the
// reference evaluator dataplane.FirstMatch: random rule sets (nested v4 and v6 prefixes, rules
// with and without ports, over TCP, UDP and SCTP, allow and deny) and random packets (TCP SYNs,
// UDP, SCTP and ICMP to destinations among the prefixes); the program's verdict and the rule
// whose counter the packet incremented must be FirstMatch's, and so must the rule egressctl's
// trace finds in the maps (FirstMatch over the rules read back from them).
func TestPrivilegedClassifierMatchesFirstMatch(t *testing.T) {
	c := load(t)
	r := rand.New(rand.NewPCG(11, uint64(13)))
	prefix := func() netip.Prefix {
		switch r.IntN(8) {
		case 0:
			return netip.MustParsePrefix("0.0.0.0/0")
		case 1:
			a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(r.IntN(4)), 15: byte(r.IntN(4))})
			return netip.PrefixFrom(a, []int{0, 32, 40, 64, 128}[r.IntN(5)]).Masked()
		}
		a := netip.AddrFrom4([4]byte{192, byte(r.IntN(3)), byte(r.IntN(4)), byte(r.IntN(4))})
		return netip.PrefixFrom(a, 8+r.IntN(25)).Masked()
	}
	protos := map[uint8]string{6: "tcp", 17: "udp", 132: "sctp"}
	port := func() dataplane.Port {
		return dataplane.Port{Protocol: []uint8{6, 17, 132}[r.IntN(3)], Port: uint16(1 + r.IntN(4))}
	}
	dst := func() netip.Addr {
		a := prefix().Addr()
		if a.Is4() {
			b := a.As4()
			b[0], b[3] = 192, byte(r.IntN(4))
			return netip.AddrFrom4(b)
		}
		b := a.As16()
		b[15] = byte(r.IntN(4))
		return netip.AddrFrom16(b)
	}
	in, err := classifier.Inspect(pinRoot())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	packets, decided := 0, map[string]int{}
	for round := range 150 {
		var rules []dataplane.FirewallRule
		for i := range 1 + r.IntN(40) {
			rule := dataplane.FirewallRule{Index: i, Deny: r.IntN(2) == 0, Text: fmt.Sprint("rule ", i)}
			for range 1 + r.IntN(3) {
				rule.Prefixes = append(rule.Prefixes, prefix())
			}
			if r.IntN(2) == 0 {
				for range 1 + r.IntN(3) {
					rule.Ports = append(rule.Ports, port())
				}
			}
			rules = append(rules, rule)
		}
		st := firewallState()
		st.Firewalls[0].Rules = rules
		if failed := c.Apply(st, nil, nil); len(failed) > 0 {
			t.Fatal(failed)
		}
		before, err := c.FirewallCounters()
		if err != nil {
			t.Fatal(err)
		}
		for range 60 {
			d, pt := dst(), port()
			proto := protos[pt.Protocol]
			if r.IntN(8) == 0 {
				pt, proto = dataplane.Port{Protocol: 1}, "icmp"
				if d.Is6() {
					pt.Protocol = 58
				}
			}
			src := podA
			if d.Is6() {
				src = podA6
			}
			verdict, _ := run(t, c, pkt(t, src, d, proto, pt.Port, 0, false))
			packets++
			after, err := c.FirewallCounters()
			if err != nil {
				t.Fatal(err)
			}
			counted := -1
			for ref, v := range after {
				if v != before[ref] {
					if counted >= 0 {
						t.Fatalf("round %d: one packet counted for rules %d and %d", round, counted, ref.Rule)
					}
					counted = ref.Rule
				}
			}
			before = after
			want, wantVerdict, name := -1, uint32(tcxNext), "no match"
			if m, ok := dataplane.FirstMatch(rules, d, pt.Protocol, pt.Port); ok {
				want, name = m.Index, "allow"
				if m.Deny {
					wantVerdict, name = tcxDrop, "deny"
				}
			}
			decided[name]++
			tr, err := in.Trace(src, d, pt.Protocol, pt.Port)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Rule != want || tr.Verdict != name && want >= 0 {
				t.Fatalf("round %d: %s %s port %d: trace says %s by rule %d, FirstMatch %s by rule %d\nrules:\n%s",
					round, proto, d, pt.Port, tr.Verdict, tr.Rule, name, want, dump(rules))
			}
			if verdict != wantVerdict || counted != want {
				t.Fatalf("round %d: %s %s port %d: program says %#x by rule %d, FirstMatch %#x by rule %d\nrules:\n%s",
					round, proto, d, pt.Port, verdict, counted, wantVerdict, want, dump(rules))
			}
		}
	}
	t.Logf("%d packets: %v", packets, decided)
}

func dump(rules []dataplane.FirewallRule) string {
	s := ""
	for _, r := range rules {
		s += fmt.Sprintf("  %d deny=%v %v %v\n", r.Index, r.Deny, r.Prefixes, r.Ports)
	}
	return s
}
