// Package nft owns the nftables table inet egressd. Every sync that changes it rewrites the whole
// table in one transaction, so the kernel goes from the old content to the new at once.
//
// It holds what must be judged after DNAT: a local pod's traffic to a Service backend outside the
// cluster networks, which the classifier (before DNAT) only sees addressed to the Service.
package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/dataplane"
)

// Names of egressd's nftables objects (part of the operator contract).
const (
	TableName = "egressd"
	// ServiceBackendsChain drops, in the forward hook, DNATed traffic from a pod to a backend its
	// namespace's EgressFirewall denies.
	ServiceBackendsChain = "fw_service_backends"
	BackendDeny4Set      = "fw_backend_deny4"
	BackendDeny6Set      = "fw_backend_deny6"
)

const ctStatusDstNAT = 0x20 // IPS_DST_NAT

// Table programs the table.
type Table struct {
	conn *nftables.Conn
	// written is what the table holds, per element, with the EgressFirewall it came from; nil
	// until the first Apply (a predecessor's table keeps enforcing until then).
	written map[dataplane.BackendDeny]bool
}

// New opens a netlink connection to nftables in the current network namespace.
func New() (*Table, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return &Table{conn: c}, nil
}

// Apply makes the table hold s.BackendDenies. The elements of an EgressFirewall that failed to
// compile stay as they were (fail closed). Returns the error per EgressFirewall whose elements
// could not be written.
func (t *Table) Apply(s *dataplane.State) map[dataplane.Origin]error {
	want := map[dataplane.BackendDeny]bool{}
	for _, d := range s.BackendDenies {
		want[d] = true
	}
	failed := map[string]bool{}
	for _, fw := range s.Firewalls {
		if fw.Err != nil {
			failed[fw.Origin.Namespace] = true
		}
	}
	for d := range t.written {
		if failed[d.Origin.Namespace] {
			want[d] = true
		}
	}
	if t.written != nil && maps.Equal(want, t.written) {
		return nil
	}
	if err := t.write(want); err != nil {
		out := map[dataplane.Origin]error{}
		for d := range want {
			o := d.Origin
			o.Rule = 0
			out[o] = fmt.Errorf("nftables table inet %s: %w", TableName, err)
		}
		return out
	}
	t.written = want
	return nil
}

// write replaces the table in one transaction (add, delete, add: the delete needs the table to
// exist, and the batch succeeds whether or not it did). An empty state leaves no table.
func (t *Table) write(elems map[dataplane.BackendDeny]bool) error {
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	t.conn.AddTable(table)
	t.conn.DelTable(table)
	if len(elems) == 0 {
		return t.conn.Flush()
	}
	t.conn.AddTable(table)
	policy := nftables.ChainPolicyAccept
	chain := t.conn.AddChain(&nftables.Chain{Name: ServiceBackendsChain, Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityFilter - 10), Policy: &policy})
	for _, fam := range []struct {
		set   string
		v4    bool
		proto byte
	}{{BackendDeny4Set, true, unix.NFPROTO_IPV4}, {BackendDeny6Set, false, unix.NFPROTO_IPV6}} {
		set := &nftables.Set{Table: table, Name: fam.set, Concatenation: true,
			KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)}
		if !fam.v4 {
			set.KeyType = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)
		}
		var es []nftables.SetElement
		for _, d := range sorted(elems) {
			if d.Backend.Is4() == fam.v4 {
				es = append(es, nftables.SetElement{Key: elementKey(d)})
			}
		}
		if err := t.conn.AddSet(set, es); err != nil {
			return err
		}
		t.conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: backendRule(set, fam.proto, fam.v4)})
	}
	return t.conn.Flush()
}

// backendRule: meta nfproto <fam> ct direction original ct status dnat
// <ip|ip6> saddr . <ip|ip6> daddr . meta l4proto . th dport @set counter drop
func backendRule(set *nftables.Set, nfproto byte, v4 bool) []expr.Any {
	addrLen, saddr, daddr := uint32(16), uint32(8), uint32(24)
	if v4 {
		addrLen, saddr, daddr = 4, 12, 16
	}
	// Concatenated keys live in the 32-bit registers from 9 on, each field padded to 4 bytes.
	regs := addrLen / 4
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfproto}},
		&expr.Ct{Register: 1, Key: expr.CtKeyDIRECTION},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}}, // IP_CT_DIR_ORIGINAL
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(ctStatusDstNAT), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseNetworkHeader, Offset: saddr, Len: addrLen},
		&expr.Payload{DestRegister: 9 + regs, Base: expr.PayloadBaseNetworkHeader, Offset: daddr, Len: addrLen},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9 + 2*regs},
		&expr.Payload{DestRegister: 10 + 2*regs, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 9, SetName: set.Name, SetID: set.ID},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// elementKey is the concatenation pod . backend . protocol . port, each field padded to 4 bytes.
func elementKey(d dataplane.BackendDeny) []byte {
	var k []byte
	k = append(k, d.Pod.AsSlice()...)
	k = append(k, d.Backend.AsSlice()...)
	k = append(k, d.Protocol, 0, 0, 0)
	k = binary.BigEndian.AppendUint16(k, d.Port)
	return append(k, 0, 0)
}

func sorted(elems map[dataplane.BackendDeny]bool) []dataplane.BackendDeny {
	out := slices.Collect(maps.Keys(elems))
	slices.SortFunc(out, func(a, b dataplane.BackendDeny) int {
		if c := a.Pod.Compare(b.Pod); c != 0 {
			return c
		}
		if c := a.Backend.Compare(b.Backend); c != 0 {
			return c
		}
		return int(a.Protocol)<<16 | int(a.Port) - (int(b.Protocol)<<16 | int(b.Port))
	})
	return out
}

// Cleanup removes the table (egressctl cleanup); no table is not an error.
func Cleanup() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	c.AddTable(table)
	c.DelTable(table)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}
