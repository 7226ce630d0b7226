package nft

import (
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Regular chains (see the package comment).
const (
	serviceBackendsChain = "fw_service_backends"
	qosBackendsChain     = "qos_service_backends"
	egressIPPrerouting   = "egressip_prerouting"
	egressIPSNAT         = "egressip_snat"
	egressIPGuard        = "egressip_guard"
	egressIPGuardSteered = "egressip_guard_steered"
	postroutingGuard     = "postrouting_guard"
	egressIPReversePath  = "egressip_reverse_path"
)

// baseChain is a base chain and the regular chains it jumps to, in order.
type baseChain struct {
	name    string
	typ     nftables.ChainType
	hook    *nftables.ChainHook
	prio    nftables.ChainPriority
	targets []string
}

// baseChains are the hooks egressd uses, at priorities relative to the standard ones (the
// contract of the package comment).
var baseChains = []baseChain{
	// After conntrack and before mangle, where ip6tables' rpfilter of firewalld's iptables
	// backend is (the marks egressIPPrerouting gives replies for it: reversepath.go).
	{"prerouting_mangle", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, *nftables.ChainPriorityMangle - 10, []string{egressIPPrerouting, extroutePrerouting}},
	// After DNAT (kube-proxy's, at dstnat) and before the routing decision it steers.
	{"prerouting_dstnat", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, *nftables.ChainPriorityNATDest + 10, []string{steerPodsChain}},
	// After every standard priority and the reverse path checks at them (firewalld's at
	// filter + 10), just before the routing decision: takes the marks given for them back, then
	// marks the replies to other nodes' pods for their way back (steering.go), which those
	// checks never see.
	{"prerouting_route", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, reversePathDone, []string{egressIPReversePath, steerRepliesChain}},
	{"forward_mangle", nftables.ChainTypeFilter, nftables.ChainHookForward, *nftables.ChainPriorityMangle, []string{qosBackendsChain}},
	// dns_snoop last: a packet back from the queue skips the rest of the chain (dnssnoop.go).
	{"forward_filter", nftables.ChainTypeFilter, nftables.ChainHookForward, *nftables.ChainPriorityFilter, []string{serviceBackendsChain, frontendsChain, dnsSnoopChain}},
	// A backend on this node (a hostNetwork endpoint, the API server of a control-plane node):
	// after DNAT the connection is delivered locally, not forwarded.
	{"input_filter", nftables.ChainTypeFilter, nftables.ChainHookInput, *nftables.ChainPriorityFilter, []string{serviceBackendsChain}},
	// After IPVS (98, 99), which takes the flows of the frontends it serves at the input hook: a
	// frontend on one of the node's addresses that nothing translated.
	{"input_srcnat", nftables.ChainTypeFilter, nftables.ChainHookInput, *nftables.ChainPriorityNATSource + 1, []string{frontendsChain}},
	// The answers of a resolver on this node (a node-local DNS cache on hostNetwork).
	{"output_filter", nftables.ChainTypeFilter, nftables.ChainHookOutput, *nftables.ChainPriorityFilter, []string{dnsSnoopChain}},
	// Before the CNI's masquerade, which is at srcnat.
	{"postrouting_srcnat", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, *nftables.ChainPriorityNATSource - 10, []string{egressIPSNAT}},
	// After every NAT: the source address here is the one the packet leaves with.
	{postroutingGuard, nftables.ChainTypeFilter, nftables.ChainHookPostrouting, *nftables.ChainPriorityNATSource + 200, []string{egressIPGuard}},
}

// activeTargets are the base chains' jump targets whose features have elements: every chain and
// rule of a hook costs every packet that passes it, so a node pays only for the features it
// uses (a node without EgressIP, steering, Service backends to judge or pods whose DNS answers
// the agent reads has no base chain).
// A pod steered anywhere (an EgressIP, a gateway, an EgressService) has elements in the steering
// sets, which keep the guard that drops it rather than leak it.
func activeTargets(c contents) []string {
	has := func(sets ...string) bool {
		return slices.ContainsFunc(sets, func(s string) bool { return len(c[s]) > 0 })
	}
	var out []string
	if has(backendDeny4Set, backendDeny6Set) {
		out = append(out, serviceBackendsChain)
	}
	if has(backendDSCP4Set, backendDSCP6Set) {
		out = append(out, qosBackendsChain)
	}
	if has(firewalled4Set, firewalled6Set) && has(frontends4Set, frontends6Set) {
		out = append(out, frontendsChain)
	}
	if has(snat4Set, snat6Set, addrs4Set, addrs6Set, guarded4Set, guarded6Set, secondary4Set, secondary6Set, remotePods4Set, remotePods6Set,
		steerNexthops4Set, steerNexthops6Set, steerDevicesSet, extrouteGateways4Set, extrouteGateways6Set, extrouteMarksSet) {
		out = append(out, egressIPPrerouting, egressIPSNAT, egressIPGuard)
	}
	if has(extrouteGateways4Set, extrouteGateways6Set, extrouteMarksSet) {
		out = append(out, extroutePrerouting)
	}
	if has(secondaryMarks6Set) {
		out = append(out, egressIPReversePath)
	}
	if has(steerPods4Set, steerPods6Set, steerRemote4Set, steerRemote6Set) {
		out = append(out, steerPodsChain)
	}
	if has(replyPods4Set, replyPods6Set) {
		out = append(out, steerRepliesChain)
	}
	if has(dnsPods4Set, dnsPods6Set) {
		out = append(out, dnsSnoopChain)
	}
	return out
}

// regularChains are the features' chains, in the order they are created.
var regularChains = []string{serviceBackendsChain, frontendReject, frontendsChain, qosBackendsChain, egressIPPrerouting, egressIPSNAT, egressIPGuardSteered, egressIPGuard, extroutePrerouting, steerPodsChain, dnsSnoopChain, egressIPReversePath, steerRepliesChain}

// setDefs are every set and map of the table.
var setDefs = slices.Concat(backendSets, frontendSets, qosSets, egressIPSets, extrouteSets, steerSets, dnsSnoopSets)

// objects are the named counters of the table.
var objects = []string{leaksCounter, misroutedCounter, unknownCounter, frontendDrops}

// tableSize is the number of chains, sets and objects the table holds (the kernel's "use" of
// the table) besides the base chains in use and the qos_dscp_<n>, extroute_return_<mark> and
// steer_mark_<mark> chains, to notice that something was deleted behind egressd's back.
var tableSize = uint32(len(regularChains) + len(setDefs) + len(objects))

// usedBaseChains are the base chains with a jump target in active: a hook without a chain costs
// nothing, one with an empty chain still costs every packet that passes it.
func usedBaseChains(active []string) []baseChain {
	var out []baseChain
	for _, b := range baseChains {
		if slices.ContainsFunc(b.targets, func(t string) bool { return slices.Contains(active, t) }) {
			out = append(out, b)
		}
	}
	return out
}

// writeTable queues, on the connection's batch, the whole table with the sets' elements: the
// table is deleted and added again in the same transaction, which succeeds whether or not it
// existed.
func writeTable(c *nftables.Conn, mask uint32, queue dnsQueue, elems contents) error {
	c.AddTable(table)
	c.DelTable(table)
	c.AddTable(table)
	chains := map[string]*nftables.Chain{}
	dscps, returns, steers := dscpChains(elems), returnChains(elems), steerChains(elems)
	for _, name := range slices.Concat(regularChains, dscps, returns, steers) { // before the maps that jump to them
		chains[name] = c.AddChain(&nftables.Chain{Name: name, Table: table})
	}
	accept := nftables.ChainPolicyAccept
	active := activeTargets(elems)
	used := usedBaseChains(active)
	for _, b := range used {
		prio := b.prio
		chains[b.name] = c.AddChain(&nftables.Chain{Name: b.name, Table: table, Type: b.typ, Hooknum: b.hook,
			Priority: &prio, Policy: &accept})
	}
	sets := map[string]*nftables.Set{}
	for _, def := range setDefs {
		s := *def // AddSet gives the set an ID for this transaction
		if err := c.AddSet(&s, nil); err != nil {
			return err
		}
		if err := inMessages(c.SetAddElements, &s, elems.elements(def)); err != nil {
			return err
		}
		sets[s.Name] = &s
	}
	for _, name := range objects {
		c.AddObj(&nftables.CounterObj{Table: table, Name: name})
	}
	rules := map[string][][]expr.Any{serviceBackendsChain: backendRules(sets), frontendsChain: frontendRules(sets),
		frontendReject: frontendRejectRules(), qosBackendsChain: qosRules(sets)}
	for _, name := range dscps {
		var d uint8
		fmt.Sscanf(name, "qos_dscp_%d", &d)
		rules[name] = dscpRules(d)
	}
	for name, rs := range egressIPRules(mask, sets) {
		rules[name] = rs
	}
	rules[extroutePrerouting] = extrouteRules(mask, sets)
	for _, name := range returns {
		rules[name] = returnRules(name, mask)
	}
	rules[steerPodsChain] = steerRules(mask, sets)
	rules[steerRepliesChain] = replyRules(sets)
	if slices.Contains(active, dnsSnoopChain) { // see dnssnoop.go
		rules[dnsSnoopChain] = dnsSnoopRules(queue, sets)
	}
	for _, name := range steers {
		rules[name] = steerMarkRules(name, mask)
	}
	for _, b := range used { // the jumps first, then what the features add after them
		var jumps [][]expr.Any
		for _, target := range b.targets {
			if !slices.Contains(active, target) {
				continue
			}
			jumps = append(jumps, []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: target}})
		}
		rules[b.name] = append(jumps, rules[b.name]...)
	}
	for name, rs := range rules {
		if chains[name] == nil {
			continue // a base chain not in use: its feature's rules are not needed either
		}
		for _, r := range rs {
			c.AddRule(&nftables.Rule{Table: table, Chain: chains[name], Exprs: r})
		}
	}
	return nil
}

// Expression helpers. Registers: 1 is a 16-byte register (enough for an IPv6 address);
// concatenations use the 4-byte registers from 9 on, each field padded to 4 bytes.

func nfproto(v4 bool) []expr.Any {
	p := byte(unix.NFPROTO_IPV6)
	if v4 {
		p = unix.NFPROTO_IPV4
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// addrField loads the source (or destination) address into reg.
func addrField(v4, src bool, reg uint32) *expr.Payload {
	off, n := uint32(24), uint32(16)
	if src {
		off = 8
	}
	if v4 {
		off, n = 16, 4
		if src {
			off = 12
		}
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}

// markBits loads meta mark & mask into reg.
func markBits(mask, reg uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg},
		&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: make([]byte, 4)},
	}
}

// marked matches packets with some of the mask's bits set.
func marked(mask uint32) []expr.Any {
	return append(markBits(mask, 1), &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)})
}

// setMark sets mark under mask in skb->mark (or, with ct, the conntrack mark), keeping the
// other bits: meta mark set meta mark & ~mask ^ mark.
func setMark(mark, mask uint32, ct bool) []expr.Any {
	keep := &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(^mask),
		Xor: binaryutil.NativeEndian.PutUint32(mark & mask)}
	if ct {
		return []expr.Any{&expr.Ct{Register: 1, Key: expr.CtKeyMARK}, keep, &expr.Ct{Register: 1, Key: expr.CtKeyMARK, SourceRegister: true}}
	}
	return []expr.Any{&expr.Meta{Register: 1, Key: expr.MetaKeyMARK}, keep, &expr.Meta{Register: 1, Key: expr.MetaKeyMARK, SourceRegister: true}}
}

// ctStatus matches ct status & bits != 0 (or == 0 with none).
func ctStatus(bits uint32, none bool) []expr.Any {
	op := expr.CmpOpNeq
	if none {
		op = expr.CmpOpEq
	}
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: make([]byte, 4)},
	}
}

// ctDirection matches the conntrack direction (IP_CT_DIR_ORIGINAL 0, IP_CT_DIR_REPLY 1).
func ctDirection(dir byte) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyDIRECTION},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{dir}},
	}
}

func lookup(s *nftables.Set, reg uint32, invert bool) *expr.Lookup {
	return &expr.Lookup{SourceRegister: reg, SetName: s.Name, SetID: s.ID, Invert: invert}
}

// ctState matches a conntrack state bit (ct state <state>).
func ctState(bit uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bit), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// Conntrack states (include/uapi/linux/netfilter/nf_conntrack_common.h: NF_CT_STATE_BIT(IP_CT_NEW)
// and NF_CT_STATE_UNTRACKED_BIT).
const (
	ctStateNew       = 1 << 3
	ctStateUntracked = 1 << 6
)

// Status bits of a conntrack entry (include/uapi/linux/netfilter/nf_conntrack_common.h).
const (
	ctStatusSrcNAT = 0x10 // IPS_SRC_NAT
	ctStatusDstNAT = 0x20 // IPS_DST_NAT
)

const (
	ctDirOriginal = 0
	ctDirReply    = 1
)
