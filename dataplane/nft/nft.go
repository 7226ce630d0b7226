// Package nft owns the nftables table inet egressd. Each Apply changes it in one transaction, so
// the kernel goes from the old content to the new at once.
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
	"sync"

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

// Counters of packets dropped after DNAT.
type Counters struct {
	Packets, Bytes uint64
}

// Table programs the table.
type Table struct {
	conn *nftables.Conn
	mu   sync.Mutex // Apply and Counters may run concurrently
	// written is what the sets hold, by element key, with the EgressFirewall rule each came
	// from; nil until the first Apply (a predecessor's table keeps enforcing until then).
	written map[string]dataplane.BackendDeny
	// retired are the counts of elements since removed, so that counters never go back.
	retired map[dataplane.Origin]Counters
}

// New opens a netlink connection to nftables in the current network namespace.
func New() (*Table, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return &Table{conn: c, retired: map[dataplane.Origin]Counters{}}, nil
}

var table = &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}

// sets are the two families' sets, as the kernel knows them by name.
var sets = []*nftables.Set{
	{Table: table, Name: BackendDeny4Set, Concatenation: true, Counter: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)},
	{Table: table, Name: BackendDeny6Set, Concatenation: true, Counter: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)},
}

// setOf is the index in sets of the family of an element key.
func setOf(key string) int {
	if len(key) == 16 {
		return 0
	}
	return 1
}

// Apply makes the table hold s.BackendDenies. The elements of an EgressFirewall that failed to
// compile stay as they were (fail closed). Returns the error per EgressFirewall whose elements
// could not be written.
func (t *Table) Apply(s *dataplane.NftablesState) map[dataplane.Origin]error {
	t.mu.Lock()
	defer t.mu.Unlock()
	failed := map[string]bool{}
	for _, ns := range s.KeepBackendDenies {
		failed[ns] = true
	}
	want := map[string]dataplane.BackendDeny{}
	for k, d := range t.written {
		if failed[d.Origin.Namespace] {
			want[k] = d
		}
	}
	for _, d := range s.BackendDenies {
		want[string(elementKey(d))] = d
	}
	if t.written != nil && maps.Equal(want, t.written) {
		return nil
	}
	var err error
	if t.written != nil && len(t.written) > 0 && len(want) > 0 {
		err = t.update(want)
	}
	if t.written == nil || len(t.written) == 0 || len(want) == 0 || err != nil {
		// A first write, the last element gone, or an update refused (the table changed behind
		// our back): the whole table again.
		err = t.rewrite(want)
	}
	if err != nil {
		out := map[dataplane.Origin]error{}
		for _, d := range want {
			o := d.Origin
			o.Rule = 0
			out[o] = fmt.Errorf("nftables table inet %s: %w", TableName, err)
		}
		return out
	}
	t.written = want
	return nil
}

// update adds and removes elements in one transaction.
func (t *Table) update(want map[string]dataplane.BackendDeny) error {
	var add, del [2][]nftables.SetElement
	for k := range want {
		if _, ok := t.written[k]; !ok {
			add[setOf(k)] = append(add[setOf(k)], nftables.SetElement{Key: []byte(k)})
		}
	}
	for k := range t.written {
		if _, ok := want[k]; !ok {
			del[setOf(k)] = append(del[setOf(k)], nftables.SetElement{Key: []byte(k)})
		}
	}
	if len(del[0])+len(del[1]) > 0 {
		t.retire(func(k string) bool { _, keep := want[k]; return !keep })
	}
	for i, set := range sets {
		if len(del[i]) > 0 {
			if err := t.conn.SetDeleteElements(set, del[i]); err != nil {
				return err
			}
		}
		if len(add[i]) > 0 {
			if err := t.conn.SetAddElements(set, add[i]); err != nil {
				return err
			}
		}
	}
	return t.conn.Flush()
}

// rewrite replaces the table in one transaction (add, delete, add: the delete needs the table to
// exist, and the batch succeeds whether or not it did). No elements leave no table.
func (t *Table) rewrite(want map[string]dataplane.BackendDeny) error {
	t.retire(func(string) bool { return true })
	t.conn.AddTable(table)
	t.conn.DelTable(table)
	if len(want) == 0 {
		return t.conn.Flush()
	}
	t.conn.AddTable(table)
	policy := nftables.ChainPolicyAccept
	chain := t.conn.AddChain(&nftables.Chain{Name: ServiceBackendsChain, Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityFilter - 10), Policy: &policy})
	keys := slices.Sorted(maps.Keys(want))
	for i, set := range sets {
		var es []nftables.SetElement
		for _, k := range keys {
			if setOf(k) == i {
				es = append(es, nftables.SetElement{Key: []byte(k)})
			}
		}
		s := *set // AddSet gives the set an ID for this transaction
		if err := t.conn.AddSet(&s, es); err != nil {
			return err
		}
		t.conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: backendRule(&s, i == 0)})
	}
	return t.conn.Flush()
}

// retire adds the counts of the written elements that gone selects to the retired counts,
// before they are removed.
func (t *Table) retire(gone func(key string) bool) {
	for k, c := range t.elementCounters() {
		if d, ok := t.written[k]; ok && gone(k) {
			r := t.retired[d.Origin]
			t.retired[d.Origin] = Counters{Packets: r.Packets + c.Packets, Bytes: r.Bytes + c.Bytes}
		}
	}
}

// elementCounters reads the counter of every element (none when there is no table).
func (t *Table) elementCounters() map[string]Counters {
	out := map[string]Counters{}
	for _, set := range sets {
		es, err := t.conn.GetSetElements(set)
		if err != nil {
			continue
		}
		for _, e := range es {
			if e.Counter != nil {
				out[string(e.Key)] = Counters{Packets: e.Counter.Packets, Bytes: e.Counter.Bytes}
			}
		}
	}
	return out
}

// Counters are the packets and bytes dropped after DNAT per EgressFirewall rule (the Origin of
// its elements), since the agent started.
func (t *Table) Counters() map[dataplane.Origin]Counters {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := maps.Clone(t.retired)
	for k, c := range t.elementCounters() {
		if d, ok := t.written[k]; ok {
			o := out[d.Origin]
			out[d.Origin] = Counters{Packets: o.Packets + c.Packets, Bytes: o.Bytes + c.Bytes}
		}
	}
	return out
}

// backendRule: meta nfproto <fam> ct direction original ct status dnat
// <ip|ip6> saddr . <ip|ip6> daddr . meta l4proto . th dport @set counter drop
func backendRule(set *nftables.Set, v4 bool) []expr.Any {
	nfproto, addrLen, saddr, daddr := byte(unix.NFPROTO_IPV6), uint32(16), uint32(8), uint32(24)
	if v4 {
		nfproto, addrLen, saddr, daddr = unix.NFPROTO_IPV4, 4, 12, 16
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

// Cleanup removes the table (egressctl cleanup); no table is not an error.
func Cleanup() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	c.AddTable(table)
	c.DelTable(table)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}
