package rpfilter

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"
)

// IPv6 has no rp_filter sysctl: its reverse path check, where a node has one, is a firewall
// rule, firewalld's IPv6_rpfilter on RHEL-like nodes. egressd meets a check keyed by the mark
// that runs while the replies of its IPv6 secondary egress IPs carry their table's mark
// (dataplane/nft's reverse path rules); it cannot meet one keyed without the mark, or run
// before the mark is set, and no check keyed by the mark passes the replies of an IPv6 gateway
// on another interface than main's default route, nor packets that arrive through egressd's
// VXLAN tunnel (main routes their sources elsewhere, and they carry no mark). Checks6 finds the
// checks in the node's nftables ruleset so that the agent can report them (it never changes
// another's table); ip6tables rules show there too, as the kernel's x_tables matches inside
// nftables rules (iptables-nft, the iptables of RHEL 8 and later).
//
// A rule is such a check when all of these hold (and nothing else is looked at):
//   - it is in a table of family ip6 or inet, in a base chain on the prerouting hook or in a
//     chain such a chain reaches by jump or goto (a verdict map's chains are not followed);
//   - in an inet table, it does not compare `meta nfproto` with ipv4;
//   - its verdict is drop, or it rejects;
//   - it has `fib saddr . iif oif` (with or without `. mark`; not daddr) compared equal to 0
//     (`oif missing`, `oif 0`): a strict check (a loose one, without iif, passes whatever main
//     has a route back for), or the x_tables match rpfilter (ip6tables `-m rpfilter`) with
//     --invert and without --loose.
//
// It is keyed by the mark with `. mark` (nft) or --validmark (ip6tables), and then met when it
// runs after MarkFrom and before MarkUntil. A rule that several base chains reach is judged by
// the earliest.

// The priorities (prerouting hook) between which the replies of an IPv6 egress IP on a
// secondary network carry its table's mark: dataplane/nft's prerouting_mangle (mangle - 10)
// sets it, prerouting_route removes it. A check at one of them may run on either side.
const (
	MarkFrom  = -160
	MarkUntil = 300
)

// The flags of xt_rpfilter's info (include/uapi/linux/netfilter/xt_rpfilter.h).
const (
	xtRPFilterLoose     = 0x01
	xtRPFilterValidMark = 0x02
	xtRPFilterInvert    = 0x08
)

// Check6 is an IPv6 reverse path check of the node's ruleset.
type Check6 struct {
	// Table is "<family> <name>" (inet firewalld, ip6 raw), Chain the chain the rule is in, and
	// Handle the rule's handle: `nft -a list chain <Table> <Chain>` shows it.
	Table, Chain string
	Handle       uint64
	// Base is the base chain that runs it (Chain itself, or one that jumps there), at Priority.
	Base     string
	Priority int
	// Rpfilter: an ip6tables rule (-m rpfilter); else an nft fib expression.
	Rpfilter bool
	// ByMark: keyed by the packet's mark (`. mark`, --validmark).
	ByMark bool
}

// Met says whether the replies of IPv6 egress IPs on secondary networks pass it: it is keyed
// by the mark, and runs while they carry it.
func (c Check6) Met() bool { return c.ByMark && c.Priority > MarkFrom && c.Priority < MarkUntil }

// Kind names what the check is, for the metric's label and the log: fib or rpfilter, then
// no_mark (keyed without the mark), before_mark (keyed by it, but run where the replies do not
// carry it) or mark (met).
func (c Check6) Kind() string {
	k := "fib_"
	if c.Rpfilter {
		k = "rpfilter_"
	}
	switch {
	case !c.ByMark:
		return k + "no_mark"
	case !c.Met():
		return k + "before_mark"
	}
	return k + "mark"
}

// Rule is the check as nft or ip6tables would write it.
func (c Check6) Rule() string {
	switch {
	case c.Rpfilter && c.ByMark:
		return "-m rpfilter --invert --validmark -j DROP"
	case c.Rpfilter:
		return "-m rpfilter --invert -j DROP"
	case c.ByMark:
		return "fib saddr . mark . iif oif missing drop"
	}
	return "fib saddr . iif oif missing drop"
}

// Fix is what to do about it, said in the log.
func (c Check6) Fix() string {
	const firewalld = "set IPv6_rpfilter=loose (firewalld 2.2 and later) or IPv6_rpfilter=no in /etc/firewalld/firewalld.conf"
	switch {
	case c.Table == "inet firewalld":
		return firewalld
	case c.Rpfilter:
		return "if it is firewalld's (iptables backend): " + firewalld + "; else remove the rule or add --loose"
	}
	return "remove the rule, or loosen it (fib saddr . mark oif missing drop: without iif)"
}

// Ruleset is what Checks6 reads of the kernel's nftables.
type Ruleset interface {
	ListChains() ([]*nftables.Chain, error)
	GetRules(t *nftables.Table, c *nftables.Chain) ([]*nftables.Rule, error)
}

// Checks6 are the IPv6 reverse path checks of the ruleset conn reads (an nftables.Conn of the
// network namespace to look at), sorted by table, chain and handle.
func Checks6(conn Ruleset) ([]Check6, error) {
	chains, err := conn.ListChains()
	if err != nil {
		return nil, fmt.Errorf("list nftables chains: %w", err)
	}
	type key struct {
		family nftables.TableFamily
		table  string
		chain  string
	}
	byName := map[key]*nftables.Chain{}
	var bases []*nftables.Chain
	for _, c := range chains {
		if c.Table == nil || (c.Table.Family != nftables.TableFamilyIPv6 && c.Table.Family != nftables.TableFamilyINet) {
			continue
		}
		byName[key{c.Table.Family, c.Table.Name, c.Name}] = c
		if c.Hooknum != nil && *c.Hooknum == *nftables.ChainHookPrerouting && c.Priority != nil {
			bases = append(bases, c)
		}
	}
	// The earliest base chains first: a rule that several reach is judged by the first.
	slices.SortStableFunc(bases, func(a, b *nftables.Chain) int { return cmp.Compare(*a.Priority, *b.Priority) })
	rules := map[key][]*nftables.Rule{}
	var errs []error
	found := map[string]Check6{}
	for _, base := range bases {
		seen := map[key]bool{}
		var walk func(c *nftables.Chain)
		walk = func(c *nftables.Chain) {
			k := key{c.Table.Family, c.Table.Name, c.Name}
			if seen[k] {
				return
			}
			seen[k] = true
			rs, ok := rules[k]
			if !ok {
				var err error
				if rs, err = conn.GetRules(c.Table, c); err != nil {
					errs = append(errs, fmt.Errorf("list the rules of %s %s: %w", family(c.Table.Family), c.Name, err))
				}
				rules[k] = rs
			}
			for _, r := range rs {
				check, ok := check6(r, c.Table.Family)
				if ok {
					check.Table, check.Chain, check.Handle = family(c.Table.Family)+" "+c.Table.Name, c.Name, r.Handle
					check.Base, check.Priority = base.Name, int(*base.Priority)
					id := fmt.Sprintf("%s\x00%s\x00%d", check.Table, check.Chain, check.Handle)
					if _, ok := found[id]; !ok {
						found[id] = check
					}
				}
				for _, e := range r.Exprs {
					if v, ok := e.(*expr.Verdict); ok && (v.Kind == expr.VerdictJump || v.Kind == expr.VerdictGoto) {
						if next, ok := byName[key{c.Table.Family, c.Table.Name, v.Chain}]; ok {
							walk(next)
						}
					}
				}
			}
		}
		walk(base)
	}
	out := make([]Check6, 0, len(found))
	for _, c := range found {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Check6) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), cmp.Compare(a.Chain, b.Chain), cmp.Compare(a.Handle, b.Handle))
	})
	return out, errors.Join(errs...)
}

// check6 says whether r is a strict IPv6 reverse path check that drops (see Checks6), and
// whether it is keyed by the mark.
func check6(r *nftables.Rule, fam nftables.TableFamily) (c Check6, ok bool) {
	var drops, strict bool
	// fibs: the registers a strict `fib saddr . iif oif` loaded, and whether keyed by the mark;
	// nfproto: the registers holding `meta nfproto`.
	fibs, nfproto := map[uint32]bool{}, map[uint32]bool{}
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case *expr.Meta:
			if e.Key == expr.MetaKeyNFPROTO && !e.SourceRegister {
				nfproto[e.Register] = true
			} else {
				delete(nfproto, e.Register)
			}
		case *expr.Fib:
			delete(fibs, e.Register)
			if e.FlagSADDR && e.FlagIIF && !e.FlagDADDR && e.ResultOIF {
				fibs[e.Register] = e.FlagMARK
			}
		case *expr.Cmp:
			if nfproto[e.Register] && fam == nftables.TableFamilyINet && e.Op == expr.CmpOpEq && len(e.Data) > 0 && e.Data[0] == unix.NFPROTO_IPV4 {
				return c, false // IPv4's
			}
			if byMark, ok := fibs[e.Register]; ok && e.Op == expr.CmpOpEq && !slices.ContainsFunc(e.Data, func(b byte) bool { return b != 0 }) {
				strict, c.ByMark = true, byMark
			}
		case *expr.Match:
			info, ok := e.Info.(*xt.Unknown)
			if e.Name != "rpfilter" || !ok || len(*info) == 0 {
				continue
			}
			if f := (*info)[0]; f&xtRPFilterInvert != 0 && f&xtRPFilterLoose == 0 {
				strict, c.Rpfilter, c.ByMark = true, true, f&xtRPFilterValidMark != 0
			}
		case *expr.Verdict:
			drops = drops || e.Kind == expr.VerdictDrop
		case *expr.Reject:
			drops = true
		}
	}
	return c, strict && drops
}

func family(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyINet:
		return "inet"
	}
	return fmt.Sprint(f)
}

// Dropping are the checks that drop some of egressd's IPv6 traffic: none when egressd routes
// IPv6 through no interface but main's default route's (paths false); those it cannot meet
// when every such path is a secondary network's egress IP's, whose replies carry the mark; all
// when some is not (unmarked: an IPv6 gateway on another interface, the VXLAN tunnel).
func Dropping(checks []Check6, paths, unmarked bool) []Check6 {
	var out []Check6
	for _, c := range checks {
		if paths && (unmarked || !c.Met()) {
			out = append(out, c)
		}
	}
	return out
}
