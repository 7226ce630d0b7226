package nft

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/egressd/egressd/dataplane"
)

// EgressQoS after DNAT: upstream's QoS is to-lport, so it sees a Service's backend, not the
// service address the classifier sees before DNAT. A local pod's traffic to a backend outside
// the cluster networks gets the DSCP of the first of its rules that covers the backend, here,
// after DNAT (overriding what the classifier set by the service address).
//
// nft cannot set a DSCP taken from a map on the kernels egressd supports (the value would have
// to be OR-ed with the ECN bits, a register-to-register operation of recent kernels only), so
// the maps are verdict maps: each element jumps to the chain of its DSCP value, qos_dscp_<n>,
// which sets that constant and keeps the ECN bits. Only the values in use have a chain; a change
// of that list writes the table whole.

const (
	backendDSCP4Set = "qos_backend_dscp4"
	backendDSCP6Set = "qos_backend_dscp6"
)

// qosSets map pod . backend . l4proto . port to a jump to the chain of its DSCP.
var qosSets = []*nftables.Set{
	{Table: table, Name: backendDSCP4Set, IsMap: true, Concatenation: true, DataType: nftables.TypeVerdict,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)},
	{Table: table, Name: backendDSCP6Set, IsMap: true, Concatenation: true, DataType: nftables.TypeVerdict,
		KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)},
}

func dscpChain(d uint8) string { return fmt.Sprintf("qos_dscp_%d", d) }

// wantDSCP are the backend DSCP elements s asks for, plus the written ones of namespaces whose
// EgressQoS failed to compile, by element key.
func (t *Table) wantDSCP(s *dataplane.NftablesState) map[string]dataplane.BackendDSCP {
	failed := map[string]bool{}
	for _, ns := range s.KeepBackendDSCP {
		failed[ns] = true
	}
	want := map[string]dataplane.BackendDSCP{}
	for k, d := range t.dscp {
		if failed[d.Origin.Namespace] {
			want[k] = d
		}
	}
	for _, d := range s.BackendDSCP {
		if d.DSCP > 63 || !d.Pod.IsValid() || d.Pod.Is4() != d.Backend.Is4() {
			continue
		}
		want[string(backendKey(d.Pod, d.Backend, d.Protocol, d.Port))] = d
	}
	return want
}

// addDSCP adds the backend DSCP elements to the wanted contents; an element's data is the chain
// it jumps to.
func addDSCP(c contents, dscp map[string]dataplane.BackendDSCP) {
	for k, d := range dscp {
		name := backendDSCP6Set
		if len(k) == 16 {
			name = backendDSCP4Set
		}
		chain := dscpChain(d.DSCP)
		c.add(name, k, chain)
	}
}

// dscpChains are the qos_dscp_<n> chains the contents' maps jump to, sorted.
func dscpChains(c contents) []string { return c.targets(backendDSCP4Set, backendDSCP6Set) }

// qosRules: ct direction original ct status dnat
// <ip|ip6> saddr . <ip|ip6> daddr . meta l4proto . th dport vmap @map
//
// Unlike the firewall's denies, conntrack's DNAT is asked: a namespace whose EgressQoS turned
// invalid keeps its backends' DSCP (KeepBackendDSCP) while the classifier stops marking its
// direct flows, which must then leave unmarked. So a Service's backend gets no DSCP where
// conntrack never sees the translation (Cilium's ClusterIPs: docs/compat.md).
func qosRules(sets map[string]*nftables.Set) [][]expr.Any {
	var rules [][]expr.Any
	for _, v4 := range []bool{true, false} {
		set, regs := sets[backendDSCP6Set], uint32(4)
		if v4 {
			set, regs = sets[backendDSCP4Set], 1
		}
		r := backendFlow(v4, regs, true)
		r = append(r,
			&expr.Lookup{SourceRegister: 9, SetName: set.Name, SetID: set.ID, DestRegister: 0, IsDestRegSet: true},
		)
		rules = append(rules, r)
	}
	return rules
}

// dscpRules set DSCP d, keeping the ECN bits (nft's ip dscp set d and ip6 dscp set d): the
// first two bytes of the header, masked and xored, written back (with the IPv4 checksum).
func dscpRules(d uint8) [][]expr.Any {
	load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2}
	v4 := append(nfproto(true), load,
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 2, Mask: []byte{0xff, 0x03}, Xor: []byte{0, d << 2}},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2,
			CsumType: expr.CsumTypeInet, CsumOffset: 10})
	v6 := append(nfproto(false), load,
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 2, Mask: []byte{0xf0, 0x3f}, Xor: []byte{d >> 2, (d & 3) << 6}},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2})
	return [][]expr.Any{v4, v6}
}
