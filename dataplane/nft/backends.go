package nft

import (
	"encoding/binary"
	"maps"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/egressd/egressd/dataplane"
)

// EgressFirewall's judgement after DNAT: the classifier runs before DNAT and sees only the
// Service address (exempt as a cluster network), so a local pod's traffic to a Service backend
// outside the cluster networks is judged here, by the backend.

const (
	backendDeny4Set = "fw_backend_deny4"
	backendDeny6Set = "fw_backend_deny6"
)

// backendSets hold pod . backend . l4proto . port, with a counter per element (the drops of
// one EgressFirewall rule, for metrics).
var backendSets = []*nftables.Set{
	{Table: table, Name: backendDeny4Set, Concatenation: true, Counter: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)},
	{Table: table, Name: backendDeny6Set, Concatenation: true, Counter: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)},
}

// wantDenies are the backend denies s asks for, plus the written ones of namespaces whose
// EgressFirewall failed to compile (fail closed), by element key.
func (t *Table) wantDenies(s *dataplane.NftablesState) map[string]dataplane.BackendDeny {
	failed := map[string]bool{}
	for _, ns := range s.KeepBackendDenies {
		failed[ns] = true
	}
	want := map[string]dataplane.BackendDeny{}
	for k, d := range t.denies {
		if failed[d.Origin.Namespace] {
			want[k] = d
		}
	}
	for _, d := range s.BackendDenies {
		want[string(denyKey(d))] = d
	}
	return want
}

// addDenies adds the backend denies to the wanted contents.
func addDenies(c contents, denies map[string]dataplane.BackendDeny) {
	for k := range maps.Keys(denies) {
		name := backendDeny6Set
		if len(k) == 16 {
			name = backendDeny4Set
		}
		c.add(name, k, "")
	}
}

// backendRules: ct direction original
// <ip|ip6> saddr . <ip|ip6> daddr . meta l4proto . th dport @set counter drop
func backendRules(sets map[string]*nftables.Set) [][]expr.Any {
	var rules [][]expr.Any
	for _, v4 := range []bool{true, false} {
		set, regs := sets[backendDeny6Set], uint32(4)
		if v4 {
			set, regs = sets[backendDeny4Set], 1
		}
		r := backendFlow(v4, regs, false)
		r = append(r,
			lookup(set, 9, false),
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		)
		rules = append(rules, r)
	}
	return rules
}

// denyKey is the concatenation pod . backend . protocol . port, each field padded to 4 bytes.
func denyKey(d dataplane.BackendDeny) []byte {
	return backendKey(d.Pod, d.Backend, d.Protocol, d.Port)
}

// backendKey is the concatenation pod . backend . protocol . port, each field padded to 4
// bytes (16 bytes for IPv4, 40 for IPv6).
func backendKey(pod, backend netip.Addr, proto uint8, port uint16) []byte {
	var k []byte
	k = append(k, pod.AsSlice()...)
	k = append(k, backend.AsSlice()...)
	k = append(k, proto, 0, 0, 0)
	k = binary.BigEndian.AppendUint16(k, port)
	return append(k, 0, 0)
}

// backendFlow matches the original direction of a connection of one family and loads
// pod . backend . protocol . port into the registers from 9 (regs registers per address): the
// key of the sets and maps judged after DNAT. Whether conntrack did the DNAT is asked only when
// dnated: Cilium translates a pod's ClusterIP traffic in its tc program, after egressd's classifier
// and before netfilter, so conntrack sees the backend as the destination from the start. A
// direct connection to a backend gets the verdict the classifier gave it already: the sets
// hold what the same rules say of that address.
func backendFlow(v4 bool, regs uint32, dnated bool) []expr.Any {
	var r []expr.Any
	r = append(r, nfproto(v4)...)
	r = append(r, ctDirection(ctDirOriginal)...)
	if dnated { // only the connections conntrack translated (qosRules)
		r = append(r, ctStatus(ctStatusDstNAT, false)...)
	}
	return append(r,
		addrField(v4, true, 9),
		addrField(v4, false, 9+regs),
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9 + 2*regs},
		&expr.Payload{DestRegister: 10 + 2*regs, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
	)
}
