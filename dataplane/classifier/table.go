package classifier

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/egressd/egressd/dataplane"
)

// Rule is one ordered rule of a namespace's policy, with every destination prefix it covers and
// the (protocol, port) pairs it is restricted to (none: any).
type Rule struct {
	Index    int
	Deny     bool
	Prefixes []netip.Prefix
	Ports    []dataplane.Port
}

// Decision is a rule that decides; Index -1 when none does.
type Decision struct {
	Index int
	Deny  bool
}

var noDecision = Decision{Index: -1}

// Entry is what the classifier finds for a prefix of a namespace's firewall (egressd_fw).
type Entry struct {
	// Portless is the first rule without ports whose prefixes contain the prefix.
	Portless Decision
	// PortsFirst: a rule restricted to ports, earlier than Portless (or when there is none),
	// contains the prefix, so the ports table may hold an earlier match.
	PortsFirst bool
}

// PortPrefix keys the ports table: a (protocol, port) some rule names and a prefix of a rule
// naming it.
type PortPrefix struct {
	Port   dataplane.Port
	Prefix netip.Prefix
}

// Table compiles ordered rules into two longest-prefix-match tables:
//
//   - entries: for every prefix P any rule names, the first rule without ports containing P,
//     and whether a rule with ports that comes earlier contains P;
//   - ports: for every (protocol, port) any rule names and every prefix P of a rule naming it,
//     the first rule naming that (protocol, port) whose prefixes contain P.
//
// A destination's longest matching prefix in a table is contained in every prefix of that
// table containing the destination (prefixes containing one address are nested), so each
// lookup gives the first rule of its kind that matches; the earlier of the two is the first
// matching rule. Two lookups whatever the number of rules, and the tables grow with the sum of
// the rules' prefixes (times their ports), never with how many rules overlap.
func Table(rules []Rule) (entries map[netip.Prefix]Entry, ports map[PortPrefix]Decision) {
	var all []owned
	byPort := map[dataplane.Port][]owned{}
	for i, r := range rules {
		for _, p := range r.Prefixes {
			o := owned{p.Masked(), i}
			all = append(all, o)
			for _, pt := range r.Ports {
				byPort[pt] = append(byPort[pt], o) // duplicates are harmless
			}
		}
	}
	// The first portless rule and the first rule with ports containing each prefix.
	firstPortless := firstContaining(all, func(i int) bool { return len(rules[i].Ports) == 0 })
	firstWithPorts := firstContaining(all, func(i int) bool { return len(rules[i].Ports) > 0 })
	entries = make(map[netip.Prefix]Entry, len(firstPortless))
	for p, pl := range firstPortless {
		e := Entry{Portless: noDecision}
		if pl >= 0 {
			e.Portless = Decision{Index: rules[pl].Index, Deny: rules[pl].Deny}
		}
		if wp := firstWithPorts[p]; wp >= 0 && (pl < 0 || wp < pl) {
			e.PortsFirst = true
		}
		entries[p] = e
	}
	ports = map[PortPrefix]Decision{}
	for pt, os := range byPort {
		for p, i := range firstContaining(os, nil) {
			ports[PortPrefix{pt, p}] = Decision{Index: rules[i].Index, Deny: rules[i].Deny}
		}
	}
	return entries, ports
}

type owned struct {
	p    netip.Prefix
	rule int // position in rules
}

// firstContaining maps every prefix of os to the first rule (position) among os, restricted
// to those keep accepts when not nil, whose prefix contains it (-1: none). It sorts os.
func firstContaining(os []owned, keep func(int) bool) map[netip.Prefix]int {
	// Sorted by family, address, then length: a prefix comes after every prefix containing it.
	slices.SortFunc(os, func(a, b owned) int {
		if c := a.p.Addr().Compare(b.p.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.p.Bits(), b.p.Bits())
	})
	out := map[netip.Prefix]int{}
	var stack []netip.Prefix // ancestors of the current prefix, outermost first
	for i := 0; i < len(os); {
		p := os[i].p
		first := -1
		for ; i < len(os) && os[i].p == p; i++ {
			if (keep == nil || keep(os[i].rule)) && (first < 0 || os[i].rule < first) {
				first = os[i].rule
			}
		}
		for len(stack) > 0 && !contains(stack[len(stack)-1], p) {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 {
			if up := out[stack[len(stack)-1]]; up >= 0 && (first < 0 || up < first) {
				first = up
			}
		}
		out[p] = first
		stack = append(stack, p)
	}
	return out
}

func contains(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}
