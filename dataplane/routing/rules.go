package routing

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// ruleKey is everything egressd sets on a rule: `ip rule add priority P [from Src] fwmark
// Mark/Mask lookup Table`. Rules cannot be replaced in place: a changed rule is added next to
// the old one (same priority, consulted after it) and Prune removes the old one.
type ruleKey struct {
	v6         bool
	priority   int
	mark, mask uint32
	src        netip.Prefix
	table      uint32
}

// wantRule maps a rule of the state to kernel numbers.
func (c Config) wantRule(r dataplane.RouteRule) (ruleKey, error) {
	prio, err := c.priority(r.Priority)
	if err != nil {
		return ruleKey{}, err
	}
	var table uint32
	if r.Network != "" {
		table, err = networkTable(r.Network)
	} else {
		table, err = c.table(r.Table)
	}
	if err != nil {
		return ruleKey{}, err
	}
	k := ruleKey{v6: r.IPv6, priority: prio, mark: r.Mark, mask: r.Mask, table: table}
	if k.mark != 0 && k.mask == 0 {
		k.mask = 0xffffffff // as `ip rule fwmark M` without a mask
	}
	if r.Src.IsValid() {
		if r.Src.Addr().Is6() != r.IPv6 {
			return ruleKey{}, fmt.Errorf("rule %d: source %s is not of the rule's family", r.Priority, r.Src)
		}
		k.src = r.Src.Masked()
	}
	return k, nil
}

// keyOfRule reads a kernel rule back; ok is false for rules with selectors or actions egressd
// never sets, which therefore match no wanted rule.
func keyOfRule(r netlink.Rule) (k ruleKey, ok bool) {
	k = ruleKey{v6: r.Family == unix.AF_INET6, priority: r.Priority, mark: r.Mark, table: uint32(r.Table)}
	if r.Mask != nil {
		k.mask = *r.Mask
	}
	if r.Src != nil {
		a, _ := netip.AddrFromSlice(r.Src.IP)
		bits, _ := r.Src.Mask.Size()
		k.src = netip.PrefixFrom(a.Unmap(), bits)
	}
	ok = r.Dst == nil && r.IifName == "" && r.OifName == "" && r.Tos == 0 && r.TunID == 0 &&
		r.Goto < 0 && r.Flow < 0 && r.SuppressPrefixlen < 0 && r.SuppressIfgroup < 0 && !r.Invert &&
		r.Dport == nil && r.Sport == nil && r.IPProto == 0 && r.UIDRange == nil
	return k, ok
}

func (k ruleKey) rule(proto uint8) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = unix.AF_INET
	if k.v6 {
		r.Family = unix.AF_INET6
	}
	r.Priority, r.Table, r.Protocol = k.priority, int(k.table), proto
	if k.mark != 0 || k.mask != 0 {
		r.Mark, r.Mask = k.mark, &k.mask
	}
	if k.src.IsValid() {
		r.Src = &net.IPNet{IP: k.src.Addr().AsSlice(), Mask: net.CIDRMask(k.src.Bits(), k.src.Addr().BitLen())}
	}
	return r
}

// ownedRule is a rule found in egressd's priority range.
type ownedRule struct {
	key  ruleKey
	ok   bool
	rule netlink.Rule
}

// readRules returns the rules of both families in egressd's priority range.
func (r *Router) readRules() ([]ownedRule, error) {
	rules, err := retried(func() ([]netlink.Rule, error) { return r.h.RuleList(netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	var out []ownedRule
	for _, rule := range rules {
		if r.cfg.ownsPriority(rule.Priority) {
			k, ok := keyOfRule(rule)
			out = append(out, ownedRule{key: k, ok: ok, rule: rule})
		}
	}
	return out, nil
}

func (r *Router) addRule(k ruleKey) error {
	r.nl.writes++
	if err := r.h.RuleAdd(k.rule(uint8(r.cfg.Protocol))); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add rule %d: %w", k.priority, err)
	}
	return nil
}

func (r *Router) deleteRule(o ownedRule) error {
	r.nl.writes++
	rule := o.rule
	if err := r.h.RuleDel(&rule); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete rule %d: %w", o.rule.Priority, err)
	}
	return nil
}
