package dataplane

import (
	"net/netip"
	"slices"
)

// FirstMatch is the rule that decides a new flow to dst with protocol proto and destination port
// port, as the classifier decides it: the first rule, in order, that has a prefix containing dst
// and, if it names ports, names the flow's protocol and port. No match allows the flow.
//
// It is the reference the classifier's maps are checked against (differential test), and what
// judges Service backends after DNAT.
func FirstMatch(rules []FirewallRule, dst netip.Addr, proto uint8, port uint16) (FirewallRule, bool) {
	for _, r := range rules {
		if !slices.ContainsFunc(r.Prefixes, func(p netip.Prefix) bool { return p.Contains(dst) }) {
			continue
		}
		if len(r.Ports) > 0 && !slices.Contains(r.Ports, Port{Protocol: proto, Port: port}) {
			continue
		}
		return r, true
	}
	return FirewallRule{}, false
}
