package classifier

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// MaxCandidates is how many rules one prefix may need to try in order (the classifier's
// bounded loop). Only rules restricted to ports can pile up: the first rule without ports that
// contains a prefix ends its list.
const MaxCandidates = 32

// Rule is one ordered rule of a namespace's policy, with every destination prefix it covers.
type Rule struct {
	Index    int
	Deny     bool
	Prefixes []netip.Prefix
	HasPorts bool
}

// Candidate is a rule to try for a destination, in order.
type Candidate struct {
	Index    int
	Deny     bool
	HasPorts bool
}

// Table compiles ordered rules into longest-prefix-match entries: for every prefix P any rule
// names, the rules whose prefixes contain P, in rule order, cut after the first without ports.
// A destination's longest matching prefix P has exactly the rules containing the destination
// among its candidates (prefixes containing one address are nested), so the first candidate
// that matches the ports is the first matching rule: one lookup, whatever the number of rules.
func Table(rules []Rule) (map[netip.Prefix][]Candidate, error) {
	type owned struct {
		p    netip.Prefix
		rule int // position in rules
	}
	var all []owned
	for i, r := range rules {
		for _, p := range r.Prefixes {
			all = append(all, owned{p.Masked(), i})
		}
	}
	// Sorted by family, address, then length: a prefix comes after every prefix containing it.
	slices.SortFunc(all, func(a, b owned) int {
		if c := a.p.Addr().Compare(b.p.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.p.Bits(), b.p.Bits())
	})
	out := map[netip.Prefix][]Candidate{}
	var stack []netip.Prefix // ancestors of the current prefix, outermost first
	for i := 0; i < len(all); {
		p := all[i].p
		var own []int
		for ; i < len(all) && all[i].p == p; i++ {
			own = append(own, all[i].rule)
		}
		for len(stack) > 0 && !contains(stack[len(stack)-1], p) {
			stack = stack[:len(stack)-1]
		}
		var inherited []Candidate
		if len(stack) > 0 {
			inherited = out[stack[len(stack)-1]]
		}
		merged, err := merge(inherited, rules, own)
		if err != nil {
			return nil, fmt.Errorf("destination %s: %w", p, err)
		}
		out[p] = merged
		stack = append(stack, p)
	}
	return out, nil
}

func contains(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

// merge combines a parent's candidates with a prefix's own rules, in rule order, without
// duplicates, cut after the first candidate without ports.
func merge(inherited []Candidate, rules []Rule, own []int) ([]Candidate, error) {
	all := slices.Clone(inherited)
	for _, i := range own {
		r := rules[i]
		if !slices.ContainsFunc(all, func(c Candidate) bool { return c.Index == r.Index }) {
			all = append(all, Candidate{Index: r.Index, Deny: r.Deny, HasPorts: r.HasPorts})
		}
	}
	slices.SortFunc(all, func(a, b Candidate) int { return cmp.Compare(a.Index, b.Index) })
	for i, c := range all {
		if !c.HasPorts {
			all = all[:i+1]
			break
		}
	}
	if len(all) > MaxCandidates {
		return nil, fmt.Errorf("more than %d rules restricted to ports overlap here", MaxCandidates)
	}
	return all, nil
}
