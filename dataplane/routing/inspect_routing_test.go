package routing

import (
	"net/netip"
	"testing"
)

func TestSelectFollowsTheFirstMatchingRule(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	progr := Programmed{
		Rules: []ProgrammedRule{
			{Priority: 6101, Mark: 0x10000, Mask: 0xff0000, Table: 7101},
			{Priority: 6101, IPv6: true, Mark: 0x10000, Mask: 0xff0000, Table: 7101},
			{Priority: 6102, Mark: 0x20000, Mask: 0xff0000, Src: p("10.244.1.0/24"), Table: 7102},
			{Priority: 6103, Mark: 0x20000, Mask: 0xff0000, Table: 100}, // a VRF's table
		},
		Routes: []ProgrammedRoute{
			{Table: 7101, Dst: p("0.0.0.0/0"), Gateways: []netip.Addr{a("192.0.2.2"), a("192.0.2.3")}, Group: 71000002},
			{Table: 7101, Dst: p("203.0.113.0/24"), Blackhole: true},
			{Table: 7101, Dst: p("::/0"), Blackhole: true},
			{Table: 7102, Dst: p("0.0.0.0/0"), Gateways: []netip.Addr{a("192.0.2.9")}},
		},
	}
	pod := a("10.244.1.5")
	for _, c := range []struct {
		src, dst netip.Addr
		mark     uint32
		prio     int
		table    uint32
		route    string
		ok       bool
		reason   string
	}{
		{pod, a("198.51.100.1"), 0x10000, 6101, 7101, "0.0.0.0/0", true, "default route of the mark's table"},
		{pod, a("203.0.113.7"), 0x10000 | 0x4000, 6101, 7101, "203.0.113.0/24", true, "longest prefix; bits outside the mask ignored"},
		{a("fd00::5"), a("2001:db8::1"), 0x10000, 6101, 7101, "::/0", true, "the rule of the destination's family"},
		{pod, a("198.51.100.1"), 0x20000, 6102, 7102, "0.0.0.0/0", true, "source selector matches"},
		{a("10.244.2.5"), a("198.51.100.1"), 0x20000, 6103, 100, "", true, "source selector does not match: next rule, a table egressd does not own"},
		{pod, a("198.51.100.1"), 0x30000, 0, 0, "", false, "no rule for the mark"},
		{pod, a("198.51.100.1"), 0, 0, 0, "", false, "unmarked"},
	} {
		rule, route, ok := progr.Select(c.src, c.dst, c.mark)
		got := ""
		if route != nil {
			got = route.Dst.String()
		}
		if ok != c.ok || rule.Priority != c.prio || rule.Table != c.table || got != c.route {
			t.Errorf("%s: Select(%s, %s, %#x) = rule %+v, route %q, %v", c.reason, c.src, c.dst, c.mark, rule, got, ok)
		}
	}
}
