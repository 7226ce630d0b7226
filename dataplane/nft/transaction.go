package nft

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"net/netip"
	"reflect"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/egressd/egressd/dataplane"
)

// element is one entry of a set: what its content is, to tell a changed entry, and, of an
// interval, its kernel elements (its start and the end marker).
type element struct {
	data     string
	interval []nftables.SetElement
}

// contents are the entries of the sets, by set name and entry identity (the element key, or
// an interval's start).
type contents map[string]map[string]element

// add puts entry id in set, with data: the value it maps to (an address's bytes), or the chain
// its verdict jumps to. Its kernel element is made when written (kernelElements): a plan holds
// one entry per pod an egress node SNATs, replies to and guards (30,000 at the scale harness's
// size), and a kernel element of each would be 6 MB more.
func (c contents) add(set, id, data string) {
	c.entry(set, id, element{data: data})
}

// addInterval puts the interval starting at id in set: its kernel elements (start and end) and
// data to compare it by (its end).
func (c contents) addInterval(set, id, data string, els []nftables.SetElement) {
	c.entry(set, id, element{data: data, interval: els})
}

func (c contents) entry(set, id string, e element) {
	if c[set] == nil {
		c[set] = map[string]element{}
	}
	c[set][id] = e
}

// kernelElements are the kernel elements of entry id of set def.
func kernelElements(def *nftables.Set, id string, e element) []nftables.SetElement {
	if e.interval != nil {
		return e.interval
	}
	el := nftables.SetElement{Key: []byte(id)}
	switch {
	case def.IsMap && def.DataType == nftables.TypeVerdict:
		el.VerdictData = &expr.Verdict{Kind: expr.VerdictJump, Chain: e.data}
	case def.IsMap:
		el.Val = []byte(e.data)
	}
	return []nftables.SetElement{el}
}

// targets are the chains the entries of the verdict maps named jump to (their data), sorted.
// An entry whose target is the one before it is not hashed again: an egress node's replies map
// holds 10,000 entries, which all jump to one chain.
func (c contents) targets(names ...string) []string {
	in := map[string]bool{}
	last, seen := "", false
	for _, name := range names {
		for _, e := range c[name] {
			if seen && e.data == last {
				continue
			}
			last, seen = e.data, true
			in[e.data] = true
		}
	}
	return slices.Sorted(maps.Keys(in))
}

// sameMap tells whether a and b are one map: a memo's set, which the plan and the written
// table share, need not be compared element by element.
func sameMap(a, b map[string]element) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// elements are the kernel elements of set def, in the order of their entries.
func (c contents) elements(def *nftables.Set) []nftables.SetElement {
	var out []nftables.SetElement
	for _, id := range slices.Sorted(maps.Keys(c[def.Name])) {
		out = append(out, kernelElements(def, id, c[def.Name][id])...)
	}
	return out
}

// Apply makes the table hold s in one transaction, sending only the elements that changed; it
// writes the whole table when it is new, when the steering mask or the DNS answers' queue
// changed (rules hold them), or when the table lost a chain, set or counter behind egressd's
// back. An empty state leaves the table with empty sets. The elements of an EgressFirewall
// that failed to compile stay as they were (fail closed). Returns the error per object whose
// elements could not be written.
func (t *Table) Apply(s *dataplane.NftablesState) map[dataplane.Origin]error {
	t.mu.Lock()
	defer t.mu.Unlock()
	want, denies, dscp, failed := t.plan(s)
	chains, targets := dynamicChains(want), activeTargets(want)
	intact := t.written != nil && t.mask == s.SteerMask && t.queue == s.DNSSnoop.Queue && slices.Equal(chains, t.chains) &&
		slices.Equal(targets, t.targets) && t.intact()
	if intact && maps.EqualFunc(want, t.written, func(a, b map[string]element) bool {
		return sameMap(a, b) || maps.EqualFunc(a, b, func(x, y element) bool { return x.data == y.data })
	}) {
		t.dscp = dscp              // the same elements; their rules may have moved
		for k, d := range denies { // what changed, if anything, is how drops are logged
			if w, ok := t.denies[k]; ok {
				w.Log = d.Log
				t.denies[k] = w
			}
		}
		t.flushOrFail(s, failed)
		return orNil(failed)
	}
	// Pods whose NAT changes: their flows are NATed afresh once the table is written. Unknown
	// before the first Apply (a restarted agent): flows then keep the NAT they have.
	if t.written != nil {
		for _, a := range natChanges(t.written, want) {
			t.unflushed[a] = true
		}
	}
	t.readCounters()
	var err error
	if intact {
		err = t.update(want)
	}
	rewrite := !intact || err != nil // a refused update: the table changed behind our back
	if rewrite {
		if err = writeTable(t.conn, s.SteerMask, dnsQueue{s.DNSSnoop.Queue, t.compatQueue}, want); err == nil {
			err = t.conn.Flush()
		}
	}
	if err != nil {
		t.written = nil // unknown: written whole next time
		err = fmt.Errorf("nftables table inet %s: %w", TableName, err)
		for _, d := range denies {
			o := d.Origin
			o.Rule = 0
			failed[o] = err
		}
		for _, n := range s.SNAT {
			failed[n.Origin] = err
		}
		for _, d := range dscp {
			o := d.Origin
			o.Rule = 0
			failed[o] = err
		}
		return failed
	}
	prev := t.denies
	t.written, t.chains, t.targets = want, chains, targets
	t.mask, t.queue, t.denies, t.dscp = s.SteerMask, s.DNSSnoop.Queue, denies, dscp
	t.relabel(rewrite)
	t.drops.track(prev, denies, rewrite)
	t.flushOrFail(s, failed)
	return orNil(failed)
}

// plan is what the sets must hold for s: the contents, the backend denies and DSCP elements
// (with those kept for the namespaces whose objects failed to compile), and the SNATs that
// cannot be programmed. It reads the table's last written denies and DSCP elements, and keeps
// the EgressIP part while its inputs stay.
func (t *Table) plan(s *dataplane.NftablesState) (contents, map[string]dataplane.BackendDeny, map[string]dataplane.BackendDSCP, map[dataplane.Origin]error) {
	denies, dscp := t.wantDenies(s), t.wantDSCP(s)
	want := contents{}
	addDenies(want, denies)
	addFrontends(want, s)
	addDSCP(want, dscp)
	failed := t.egressIP.add(want, s)
	addReturnPaths(want, s)
	addSteered(want, s)
	t.replies.add(want, s)
	addDNSSnoop(want, s)
	return want, denies, dscp, failed
}

// flushOrFail deletes the conntrack entries of the pods whose NAT changed and of the
// connections whose return path went; on error, the EgressIPs with SNAT elements (the return
// paths) report it and the next Apply tries again.
func (t *Table) flushOrFail(s *dataplane.NftablesState, failed map[dataplane.Origin]error) {
	if err := t.flushFlows(s.Exempt); err != nil {
		for _, n := range s.SNAT {
			if failed[n.Origin] == nil {
				failed[n.Origin] = err
			}
		}
	}
	if err := t.flushGateways(s); err != nil {
		for _, r := range s.ReturnPaths {
			failed[r.Origin] = errors.Join(failed[r.Origin], err)
		}
	}
}

func orNil(m map[dataplane.Origin]error) map[dataplane.Origin]error {
	if len(m) == 0 {
		return nil
	}
	return m
}

// intact tells whether the table holds every chain, set and counter egressd wrote (the kernel
// counts them in the table's use). google/nftables v0.3.0 decodes NFTA_TABLE_USE in host byte
// order although the kernel sends it big-endian, so both readings are accepted: otherwise every
// Apply would rewrite the table and reset its element counters.
// Intact tells whether the table egressd wrote is still whole in the kernel (true before the
// first Apply): false once it was deleted, or chains of it removed, behind egressd's back.
func (t *Table) Intact() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.written == nil || t.intact()
}

func (t *Table) intact() bool {
	got, err := t.conn.ListTableOfFamily(TableName, nftables.TableFamilyINet)
	size := tableSize + uint32(len(usedBaseChains(t.targets))+len(t.chains))
	return err == nil && (got.Use == size || bits.ReverseBytes32(got.Use) == size)
}

// elementsPerMessage bounds the set elements of one netlink message: they travel in one
// attribute, whose length has 16 bits (64 KB), and past it the message is garbled and the
// kernel refuses the whole transaction. 256 elements of the largest (a concatenated key and a
// verdict or mark) stay well under.
const elementsPerMessage = 256

// inMessages queues els for set s through op (an add or a delete) in as many messages as
// elementsPerMessage needs; they are still one transaction.
func inMessages(op func(*nftables.Set, []nftables.SetElement) error, s *nftables.Set, els []nftables.SetElement) error {
	for len(els) > 0 {
		n := min(len(els), elementsPerMessage)
		if err := op(s, els[:n]); err != nil {
			return err
		}
		els = els[n:]
	}
	return nil
}

// update deletes and adds the changed entries in one transaction.
func (t *Table) update(want contents) error {
	for _, def := range setDefs {
		del, add := changedElements(t.written, want, def)
		if err := inMessages(t.conn.SetDeleteElements, def, del); err != nil {
			return err
		}
		if err := inMessages(t.conn.SetAddElements, def, add); err != nil {
			return err
		}
	}
	return t.conn.Flush()
}

// changedElements are the kernel elements of set to delete and to add to go from written to
// want: those of the entries that went, came, or whose content changed.
func changedElements(written, want contents, def *nftables.Set) (del, add []nftables.SetElement) {
	set := def.Name
	if sameMap(written[set], want[set]) {
		return nil, nil
	}
	for id, e := range written[set] {
		if w, ok := want[set][id]; !ok || w.data != e.data {
			del = append(del, kernelElements(def, id, e)...)
		}
	}
	for id, e := range want[set] {
		if w, ok := written[set][id]; !ok || w.data != e.data {
			add = append(add, kernelElements(def, id, e)...)
		}
	}
	return del, add
}

// relabel gives the counters the labels of what was just written.
func (t *Table) relabel(rewrite bool) {
	denies := map[string]dataplane.Origin{}
	for k, d := range t.denies {
		denies[k] = d.Origin
	}
	t.denyCounts.relabel(denies, rewrite)
	addrs := map[string]netip.Addr{}
	for _, name := range []string{addrs4Set, addrs6Set} {
		for k := range t.written[name] {
			a, _ := netip.AddrFromSlice([]byte(k))
			addrs[k] = a
		}
	}
	t.snatCounts.relabel(addrs, rewrite)
	names := map[string]string{}
	for _, o := range objects {
		names[o] = o
	}
	t.objectCounts.relabel(names, rewrite)
}
