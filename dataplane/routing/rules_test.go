package routing

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/egressd/egressd/dataplane"
)

// TestRuleReadBackIsTheRuleWritten: a rule egressd writes reads back as the key it was written
// from (its mark and mask, even a mask over no mark bits, its source, its table) (so a sync after a restart finds it wanted and leaves it, instead of adding it again and
// pruning the old), stamped with egressd's protocol, of its family.
func TestRuleReadBackIsTheRuleWritten(t *testing.T) {
	for name, k := range map[string]ruleKey{
		"mark":           {priority: 6100, mark: 0x10000, mask: 0xffff0000, table: 7100},
		"IPv6 from":      {v6: true, priority: 6150, mark: 1, mask: 0xffffffff, src: netip.MustParsePrefix("fd00:10::/64"), table: 7101},
		"from, no mark":  {priority: 6199, src: netip.MustParsePrefix("10.244.1.0/24"), table: 254},
		"IPv4 host from": {priority: 6101, mark: 3, mask: 3, src: netip.MustParsePrefix("10.244.1.7/32"), table: 4000000000},
		"no mark bits":   {priority: 6102, mask: 0xff00, table: 7102}, // fwmark 0/0xff00: unmarked packets only
	} {
		t.Run(name, func(t *testing.T) {
			r := k.rule(229)
			if r.Protocol != 229 {
				t.Errorf("protocol %d, want egressd's", r.Protocol)
			}
			if got, ok := keyOfRule(*r); !ok || got != k {
				t.Errorf("read back as %+v (ours: %v), want %+v", got, ok, k)
			}
			if r.Src != nil { // the library may hand an IPv4 source in its 16-byte form
				r.Src.IP = r.Src.IP.To16()
				if got, _ := keyOfRule(*r); got != k {
					t.Errorf("with a 16-byte source, read back as %+v, want %+v", got, k)
				}
			}
		})
	}
}

// TestKeyOfRuleForeignSelectors: a rule in egressd's range with a selector or action egressd
// never sets (an iif, a destination, not, a goto, a port, a uid range...) matches no wanted
// rule, so a sync replaces it rather than taking it for its own.
func TestKeyOfRuleForeignSelectors(t *testing.T) {
	_, dst, _ := net.ParseCIDR("192.0.2.0/24")
	for name, change := range map[string]func(r *netlink.Rule){
		"iif":       func(r *netlink.Rule) { r.IifName = "eth0" },
		"oif":       func(r *netlink.Rule) { r.OifName = "eth0" },
		"to":        func(r *netlink.Rule) { r.Dst = dst },
		"not":       func(r *netlink.Rule) { r.Invert = true },
		"tos":       func(r *netlink.Rule) { r.Tos = 4 },
		"goto":      func(r *netlink.Rule) { r.Goto = 6200 },
		"suppress":  func(r *netlink.Rule) { r.SuppressPrefixlen = 0 },
		"dport":     func(r *netlink.Rule) { r.Dport = netlink.NewRulePortRange(53, 53) },
		"ipproto":   func(r *netlink.Rule) { r.IPProto = 17 },
		"uid range": func(r *netlink.Rule) { r.UIDRange = netlink.NewRuleUIDRange(0, 0) },
	} {
		t.Run(name, func(t *testing.T) {
			r := ruleKey{priority: 6100, mark: 1, mask: 0xffffffff, table: 7100}.rule(229)
			change(r)
			if _, ok := keyOfRule(*r); ok {
				t.Error("taken for one of egressd's rules")
			}
		})
	}
}

// TestWantRuleSourceWithoutHostBits: a rule's source prefix is wanted without host bits, as
// the kernel keeps and reports it: a source written with them would never match the rule read
// back, which every sync would add again.
func TestWantRuleSourceWithoutHostBits(t *testing.T) {
	k, err := DefaultConfig().wantRule(dataplane.RouteRule{Priority: 3, Mark: 0x42, Table: 2, Src: netip.MustParsePrefix("10.244.1.9/24")})
	if err != nil || k.src != netip.MustParsePrefix("10.244.1.0/24") {
		t.Errorf("source %v (%v), want 10.244.1.0/24", k.src, err)
	}
	r := k.rule(229)
	if back, ok := keyOfRule(*r); !ok || back != k {
		t.Errorf("read back as %+v, want %+v", back, k)
	}
}
