package nft

import (
	"encoding/binary"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// Reverse path checks keyed by the mark. IPv6 has no rp_filter sysctl: a node's reverse path
// filter is its firewall's, firewalld's IPv6_rpfilter (on by default) on RHEL-like nodes. Since
// firewalld 1.0 it looks the source up with the packet's mark, as policy routing would route
// the reply: `meta nfproto ipv6 fib saddr . mark . iif oif missing drop` in table inet
// firewalld, chain filter_PREROUTING (priority filter + 10), and with its iptables backend
// `ip6tables -t mangle -A PREROUTING -m rpfilter --invert --validmark -j DROP`.
//
// The replies of a connection SNATed to an egress IP on a secondary network arrive through
// that IP's interface, while main routes their source (the outside) elsewhere: with mark 0
// the check drops them. So the replies of those connections get the mark of the egress IP's
// table (which copies its interface's routes) after conntrack and before mangle
// (prerouting_mangle, mangle - 10: egressip_prerouting), and lose it again before the routing
// decision (prerouting_route, after every standard priority: egressip_reverse_path), which
// must route them to their pod by main. What passes is what the egress path itself would
// accept: a reply of a connection that left through that interface, whose source that
// interface's routes reach; nothing else gets a mark. (The steering tables' throw routes, in
// nodeagent, let the pods' own packets through the same checks.)
//
// Older firewalld (raw priority, before conntrack, without the mark) cannot be met this way:
// the agent reports such checks (dataplane/rpfilter's Checks6, whose MarkFrom and MarkUntil
// are these chains' priorities).
// IPv4's reverse path filter is the rp_filter sysctl, consulted by the routing decision after
// the mark is gone: it is loosened instead (dataplane/rpfilter).

// reversePathDone is prerouting_route's priority: after security (50) and the firewalls' checks
// at the standard priorities, before the routing decision.
var reversePathDone = nftables.ChainPriority(300)

// addSecondaryMarks adds the IPv6 secondary egress IPs' marks under the mask.
func addSecondaryMarks(c contents, s egressIPInputs) {
	for _, m := range s.secondaryMarks {
		a, mark := m.EgressIP.Unmap(), m.Mark&s.mask
		if !a.Is6() || mark == 0 || mark != m.Mark {
			continue
		}
		chain := steerChain(mark)
		c.add(secondaryMarks6Set, string(a.AsSlice()), chain)
		k := binary.NativeEndian.AppendUint32(nil, mark)
		c.add(replyMarks6Set, string(k), "")
	}
}

// reversePathRules:
//
//	egressip_prerouting: meta nfproto ipv6 ct direction reply ip6 daddr vmap @egressip_secondary_marks6
//	egressip_reverse_path: meta nfproto ipv6 ct direction reply meta mark & mask @egressip_reply_marks6 meta mark set meta mark & ~mask
//
// The first runs before the reply is de-SNATed: its destination is still the egress IP. No
// other reply carries those marks at the second (the return paths' marks, which replies keep
// for routing, are other slots').
func reversePathRules(mask uint32, sets map[string]*nftables.Set) map[string][][]expr.Any {
	marks := sets[secondaryMarks6Set]
	return map[string][][]expr.Any{
		egressIPPrerouting: {slices.Concat(nfproto(false), ctDirection(ctDirReply), []expr.Any{addrField(false, false, 1),
			&expr.Lookup{SourceRegister: 1, SetName: marks.Name, SetID: marks.ID, IsDestRegSet: true}})},
		egressIPReversePath: {slices.Concat(nfproto(false), ctDirection(ctDirReply), markBits(mask, 1),
			[]expr.Any{lookup(sets[replyMarks6Set], 1, false)}, setMark(0, mask, false))},
	}
}
