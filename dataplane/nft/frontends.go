package nft

import (
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// EgressFirewall's net under the Services' frontends (dataplane.Frontend): the classifier lets a
// firewalled pod's flow to a frontend's address, protocol and port through, to be judged after
// kube-proxy's DNAT by the backend. A new flow that DNAT did not translate (a Service without
// endpoint, or kube-proxy not serving it yet, or not at all) would reach the address itself
// unjudged: it is rejected here, as kube-proxy and upstream's load balancers reject a Service
// without endpoint. Forwarded flows, and those delivered to the node (a frontend on one of its
// addresses) after IPVS, which takes a frontend's flows at the input hook before this.

const (
	firewalled4Set = "fw_pods4"
	firewalled6Set = "fw_pods6"
	frontends4Set  = "fw_frontends4"
	frontends6Set  = "fw_frontends6"
	// frontendsChain rejects what the classifier let through as a frontend's and DNAT did not
	// translate, by going to frontendReject.
	frontendsChain = "fw_frontends_without_dnat"
	frontendReject = "fw_frontend_reject"
	// frontendDrops counts its rejects.
	frontendDrops = "fw_frontend_drops"
)

// frontendSets: the local pods under an EgressFirewall, and the frontends as address . l4proto
// . port.
var frontendSets = []*nftables.Set{
	{Table: table, Name: firewalled4Set, KeyType: nftables.TypeIPAddr},
	{Table: table, Name: firewalled6Set, KeyType: nftables.TypeIP6Addr},
	{Table: table, Name: frontends4Set, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)},
	{Table: table, Name: frontends6Set, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)},
}

// addFrontends adds the firewalled pods and the frontends to the wanted contents.
func addFrontends(c contents, s *dataplane.NftablesState) {
	for _, p := range s.FirewalledPods {
		c.add(family(p, firewalled4Set, firewalled6Set), string(p.AsSlice()), "")
	}
	for _, f := range s.Frontends {
		k := frontendKey(f.Addr, f.Protocol, f.Port.Port)
		c.add(family(f.Addr, frontends4Set, frontends6Set), string(k), "")
	}
}

// frontendKey is the concatenation address . protocol . port, each field padded to 4 bytes.
func frontendKey(a netip.Addr, proto uint8, port uint16) []byte {
	k := append(a.AsSlice(), proto, 0, 0, 0)
	k = binary.BigEndian.AppendUint16(k, port)
	return append(k, 0, 0)
}

// frontendRules, for new flows (a connection that predates the Service keeps going) and
// untracked ones:
//
//	ct state new ct status & dnat == 0 <ip|ip6> saddr @fw_pods<4|6> <ip|ip6> daddr . meta
//	l4proto . th dport @fw_frontends<4|6> goto fw_frontend_reject
//	ct state untracked <the same>
func frontendRules(sets map[string]*nftables.Set) [][]expr.Any {
	var rules [][]expr.Any
	for _, v4 := range []bool{true, false} {
		pods, frontends, regs := sets[firewalled6Set], sets[frontends6Set], uint32(4)
		if v4 {
			pods, frontends, regs = sets[firewalled4Set], sets[frontends4Set], 1
		}
		judged := []expr.Any{
			addrField(v4, true, 1), lookup(pods, 1, false),
			addrField(v4, false, 9),
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9 + regs},
			&expr.Payload{DestRegister: 10 + regs, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			lookup(frontends, 9, false),
			&expr.Verdict{Kind: expr.VerdictGoto, Chain: frontendReject},
		}
		rules = append(rules,
			slices.Concat(nfproto(v4), ctState(ctStateNew), ctStatus(ctStatusDstNAT, true), judged),
			slices.Concat(nfproto(v4), ctState(ctStateUntracked), judged))
	}
	return rules
}

// frontendRejectRules: counter name fw_frontend_drops; meta l4proto tcp reject with tcp reset;
// reject with icmpx port-unreachable. A reset for TCP: ICMP errors are rate-limited per peer,
// and a connection attempt would then wait for its timeout instead of being refused.
func frontendRejectRules() [][]expr.Any {
	return [][]expr.Any{
		{&expr.Objref{Type: unix.NFT_OBJECT_COUNTER, Name: frontendDrops}},
		{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}},
		{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH}},
	}
}
