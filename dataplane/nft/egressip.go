package nft

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// EgressIP's part of the table: SNAT to the egress IP on the egress node, the identity SNAT that
// keeps the CNI's masquerade off steered packets, and the leak guard. Everything is a lookup in
// a set or map, whatever the number of pods.

const (
	snat4Set      = "egressip_snat4"
	snat6Set      = "egressip_snat6"
	exempt4Set    = "egressip_exempt4"
	exempt6Set    = "egressip_exempt6"
	addrs4Set     = "egressip_addrs4"
	addrs6Set     = "egressip_addrs6"
	guarded4Set   = "egressip_guarded4"
	guarded6Set   = "egressip_guarded6"
	spread4Set    = "egressip_spread4"
	spread6Set    = "egressip_spread6"
	secondary4Set = "egressip_secondary4"
	secondary6Set = "egressip_secondary6"
	// egress IP : jump steer_mark_<mark>, and those marks (reversepath.go)
	secondaryMarks6Set = "egressip_secondary_marks6"
	replyMarks6Set     = "egressip_reply_marks6"
	steerNexthops4Set  = "egressip_steer_nexthops4"
	steerNexthops6Set  = "egressip_steer_nexthops6"
	steerDevicesSet    = "egressip_steer_devices"
	remotePods4Set     = "egressip_remote_pods4"
	remotePods6Set     = "egressip_remote_pods6"

	leaksCounter     = "egressip_leaks"
	misroutedCounter = "egressip_misrouted"
	unknownCounter   = "egressip_unknown_pods"
)

var egressIPSets = []*nftables.Set{
	{Table: table, Name: snat4Set, IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeIPAddr},
	{Table: table, Name: snat6Set, IsMap: true, KeyType: nftables.TypeIP6Addr, DataType: nftables.TypeIP6Addr},
	{Table: table, Name: exempt4Set, Interval: true, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: exempt6Set, Interval: true, KeyType: nftables.TypeIP6Addr},
	{Table: table, Name: addrs4Set, Counter: true, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: addrs6Set, Counter: true, KeyType: nftables.TypeIP6Addr},
	{Table: table, Name: guarded4Set, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: guarded6Set, KeyType: nftables.TypeIP6Addr},
	{Table: table, Name: spread4Set, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: spread6Set, KeyType: nftables.TypeIP6Addr},
	{Table: table, Name: secondary4Set, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: secondary6Set, KeyType: nftables.TypeIP6Addr},
	{Table: table, Name: secondaryMarks6Set, IsMap: true, DataType: nftables.TypeVerdict, KeyType: nftables.TypeIP6Addr},
	{Table: table, Name: replyMarks6Set, KeyType: nftables.TypeMark, KeyByteOrder: binaryutil.NativeEndian}, // as the ifname set
	{Table: table, Name: remotePods4Set, Interval: true, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: remotePods6Set, Interval: true, KeyType: nftables.TypeIP6Addr},
	{Table: table, Name: steerNexthops4Set, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeMark, nftables.TypeIPAddr)},
	{Table: table, Name: steerNexthops6Set, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeMark, nftables.TypeIP6Addr)},
	// nft reads an ifname key in host byte order (only the listing depends on it).
	{Table: table, Name: steerDevicesSet, KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian},
}

// family picks the IPv4 or IPv6 twin of a set.
func family(a netip.Addr, v4, v6 string) string {
	if a.Is4() {
		return v4
	}
	return v6
}

// addEgressIP adds s's EgressIP elements to the wanted contents. Returns the SNATs that cannot
// be programmed.
func addEgressIP(c contents, s egressIPInputs) map[dataplane.Origin]error {
	failed := map[dataplane.Origin]error{}
	to := map[netip.Addr]netip.Addr{}
	for _, n := range s.snat {
		pod, eip := n.Pod.Unmap(), n.To.Unmap()
		switch {
		case !pod.IsValid() || !eip.IsValid() || pod.Is4() != eip.Is4():
			failed[n.Origin] = fmt.Errorf("SNAT of %s to %s: not two addresses of one family", n.Pod, n.To)
		case to[pod].IsValid() && to[pod] != eip:
			failed[n.Origin] = fmt.Errorf("SNAT of %s to %s: already SNATed to %s", pod, eip, to[pod])
		default:
			to[pod] = eip
			c.add(family(pod, snat4Set, snat6Set), string(pod.AsSlice()), string(eip.AsSlice()))
			c.add(family(eip, addrs4Set, addrs6Set), string(eip.AsSlice()), "")
		}
	}
	addRanges(c, s.exempt, exempt4Set, exempt6Set)
	addRanges(c, s.remotePods, remotePods4Set, remotePods6Set)
	for _, a := range s.guarded {
		a = a.Unmap()
		if a.IsValid() {
			c.add(family(a, guarded4Set, guarded6Set), string(a.AsSlice()), "")
		}
	}
	for _, a := range s.spread {
		a = a.Unmap()
		if a.IsValid() {
			c.add(family(a, spread4Set, spread6Set), string(a.AsSlice()), "")
		}
	}
	for _, a := range s.secondary {
		a = a.Unmap()
		if a.IsValid() {
			c.add(family(a, secondary4Set, secondary6Set), string(a.AsSlice()), "")
		}
	}
	addSecondaryMarks(c, s)
	for _, n := range s.nexthops {
		a := n.Nexthop.Unmap()
		if a.IsValid() && n.Mark&s.mask != 0 {
			k := string(append(binary.NativeEndian.AppendUint32(nil, n.Mark&s.mask), a.AsSlice()...))
			c.add(family(a, steerNexthops4Set, steerNexthops6Set), k, "")
		}
	}
	for _, d := range s.devices {
		if d != "" && len(d) < unix.IFNAMSIZ {
			k := make([]byte, unix.IFNAMSIZ)
			copy(k, d)
			c.add(steerDevicesSet, string(k), "")
		}
	}
	return failed
}

// addRanges adds prefixes to the interval set of their family, v4 or v6.
func addRanges(c contents, ps []netip.Prefix, v4, v6 string) {
	for _, r := range ranges(ps) {
		es := []nftables.SetElement{{Key: r.from.AsSlice()}}
		end := ""
		if next := r.to.Next(); next.IsValid() { // no end element: up to the last address
			es = append(es, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
			end = string(next.AsSlice())
		}
		c.addInterval(family(r.from, v4, v6), string(r.from.AsSlice()), end, es)
	}
}

// addrRange is the inclusive range of addresses from..to.
type addrRange struct{ from, to netip.Addr }

// ranges merges prefixes into disjoint, non-adjacent ranges, as an interval set must hold
// them, in order.
func ranges(ps []netip.Prefix) []addrRange {
	var rs []addrRange
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), min(p.Bits(), p.Addr().Unmap().BitLen())).Masked()
		rs = append(rs, addrRange{p.Addr(), lastAddr(p)})
	}
	slices.SortFunc(rs, func(a, b addrRange) int { return cmp.Or(a.from.Compare(b.from), a.to.Compare(b.to)) })
	var out []addrRange
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].from.Is4() == r.from.Is4() {
			last := &out[n-1]
			if next := last.to.Next(); !next.IsValid() || r.from.Compare(next) <= 0 {
				if r.to.Compare(last.to) > 0 {
					last.to = r.to
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// egressIPRules are the rules of EgressIP's chains; mask 0 leaves out those testing the mark.
func egressIPRules(mask uint32, sets map[string]*nftables.Set) map[string][][]expr.Any {
	rules := map[string][][]expr.Any{}
	add := func(chain string, parts ...[]expr.Any) { rules[chain] = append(rules[chain], slices.Concat(parts...)) }
	one := func(es ...expr.Any) []expr.Any { return es }
	ret := one(&expr.Verdict{Kind: expr.VerdictReturn})
	count := func(name string) []expr.Any {
		return one(&expr.Objref{Type: unix.NFT_OBJECT_COUNTER, Name: name}, &expr.Verdict{Kind: expr.VerdictDrop})
	}
	if mask != 0 {
		// meta mark & mask != 0 ct direction reply meta mark set meta mark & ^mask
		add(egressIPPrerouting, marked(mask), ctDirection(ctDirReply), markBits(^mask, 1),
			one(&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1}))
		for name, rs := range reversePathRules(mask, sets) {
			rules[name] = append(rules[name], rs...)
		}
	}
	pick := func(v4 bool, a, b string) *nftables.Set {
		if v4 {
			return sets[a]
		}
		return sets[b]
	}
	natFamily := func(v4 bool) uint32 {
		if v4 {
			return unix.NFPROTO_IPV4
		}
		return unix.NFPROTO_IPV6
	}
	both := []bool{true, false}
	if mask != 0 {
		// ip saddr @egressip_spread4 snat ip to ip saddr, when marked: a pod on this egress node
		// whose flow the classifier steered to another egress node keeps its pod source there
		// (its SNAT element below is for its flows that leave here).
		for _, v4 := range both {
			add(egressIPSNAT, marked(mask), nfproto(v4), one(addrField(v4, true, 1), lookup(pick(v4, spread4Set, spread6Set), 1, false),
				addrField(v4, true, 1), &expr.NAT{Type: expr.NATTypeSourceNAT, Family: natFamily(v4), RegAddrMin: 1}))
		}
	}
	for _, v4 := range both {
		// ip daddr != @egressip_exempt4 snat ip to ip saddr map @egressip_snat4
		snat := pick(v4, snat4Set, snat6Set)
		add(egressIPSNAT, nfproto(v4), one(addrField(v4, false, 1), lookup(pick(v4, exempt4Set, exempt6Set), 1, true),
			addrField(v4, true, 1), &expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: snat.Name, SetID: snat.ID},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: natFamily(v4), RegAddrMin: 1}))
	}
	if mask != 0 {
		// Identity SNAT of steered packets: a binding made here keeps the CNI's masquerade off.
		for _, v4 := range both {
			add(egressIPSNAT, marked(mask), nfproto(v4), one(addrField(v4, true, 1), &expr.NAT{Type: expr.NATTypeSourceNAT, Family: natFamily(v4), RegAddrMin: 1}))
		}
	}
	for _, v4 := range both {
		// ip saddr @egressip_guarded4 ip daddr != @egressip_exempt4 counter name egressip_leaks
		// drop: a guarded pod's new connection that is neither SNATed to an egress IP nor
		// steered goes no further, so that no later NAT (the CNI's masquerade to the node's
		// address) takes it and sticks to the flow: the guard below sees the packet only after
		// that NAT, with the node's address. Dropping its first packet leaves no conntrack entry,
		// so the flow leaves with the egress IP as soon as its SNAT is there (an egress node that
		// gets a remote pod's packets just before its SNAT element, a pod's node between its
		// SNAT element and its steering mark).
		add(egressIPSNAT, nfproto(v4), one(addrField(v4, true, 1), lookup(pick(v4, guarded4Set, guarded6Set), 1, false),
			addrField(v4, false, 1), lookup(pick(v4, exempt4Set, exempt6Set), 1, true)), count(leaksCounter))
		// ip saddr @egressip_remote_pods4 ip daddr != @egressip_exempt4 counter name
		// egressip_unknown_pods drop: another node's pod that no SNAT above took, steered here
		// before this node learnt it (same reason: no NAT binding may stick to its flow).
		add(egressIPSNAT, nfproto(v4), one(addrField(v4, true, 1), lookup(pick(v4, remotePods4Set, remotePods6Set), 1, false),
			addrField(v4, false, 1), lookup(pick(v4, exempt4Set, exempt6Set), 1, true)), count(unknownCounter))
	}
	// Replies are never judged (nor counted) by the guard.
	add(egressIPGuard, ctDirection(ctDirReply), ret)
	for _, v4 := range both {
		// ct status snat ip saddr @egressip_addrs4: the element's counter counts the packet.
		add(egressIPGuard, nfproto(v4), ctStatus(ctStatusSrcNAT, false), one(addrField(v4, true, 1), lookup(pick(v4, addrs4Set, addrs6Set), 1, false)))
	}
	local := binary.NativeEndian.AppendUint32(nil, unix.RTN_LOCAL)
	for _, v4 := range both {
		// ip saddr @egressip_secondary4 fib saddr . oif type != local counter name
		// egressip_misrouted drop: SNATed to an egress IP of a secondary network, the packet must
		// leave through the interface holding it (upstream keys that SNAT by the interface); any
		// other way out (its table not there yet, its interface down) is the wrong network.
		add(egressIPGuard, nfproto(v4), one(addrField(v4, true, 1), lookup(pick(v4, secondary4Set, secondary6Set), 1, false),
			&expr.Fib{Register: 1, FlagSADDR: true, FlagOIF: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: local}), count(misroutedCounter))
	}
	if mask != 0 {
		add(egressIPGuard, marked(mask), one(&expr.Verdict{Kind: expr.VerdictGoto, Chain: egressIPGuardSteered}))
	}
	for _, v4 := range both {
		// ip saddr @egressip_guarded4 ip daddr != @egressip_exempt4 counter name egressip_leaks drop
		add(egressIPGuard, nfproto(v4), one(addrField(v4, true, 1), lookup(pick(v4, guarded4Set, guarded6Set), 1, false),
			addrField(v4, false, 1), lookup(pick(v4, exempt4Set, exempt6Set), 1, true)), count(leaksCounter))
	}
	if mask == 0 {
		return rules
	}
	// oifname "egressd-vxlan" meta mark set meta mark & ~mask, once the guard let the packet
	// through: the tunnel routes the encapsulated packet with the inner packet's mark, which
	// would select the steering table again (a route loop) instead of the main table.
	tunnel := make([]byte, unix.IFNAMSIZ)
	copy(tunnel, dataplane.TunnelDevice)
	add(postroutingGuard, one(&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: tunnel}),
		markBits(^mask, 1), one(&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1}))
	add(egressIPGuardSteered, one(&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, lookup(sets[steerDevicesSet], 1, false)), ret)
	add(egressIPGuardSteered, nfproto(true), markBits(mask, 9), one(&expr.Rt{Register: 10, Key: expr.RtNexthop4}, lookup(sets[steerNexthops4Set], 9, false)), ret)
	add(egressIPGuardSteered, nfproto(false), markBits(mask, 9), one(&expr.Rt{Register: 10, Key: expr.RtNexthop6}, lookup(sets[steerNexthops6Set], 9, false)), ret)
	// Still with its pod source: no SNAT happened, or it is a guarded pod's address.
	add(egressIPGuardSteered, ctStatus(ctStatusSrcNAT, true), count(misroutedCounter))
	add(egressIPGuardSteered, nfproto(true), one(addrField(true, true, 1), lookup(sets[guarded4Set], 1, false)), count(misroutedCounter))
	add(egressIPGuardSteered, nfproto(false), one(addrField(false, true, 1), lookup(sets[guarded6Set], 1, false)), count(misroutedCounter))
	return rules
}
