package nft

import (
	"maps"
	"net/netip"

	"github.com/google/nftables"

	"github.com/egressd/egressd/dataplane"
)

// tally turns kernel counters, which restart at zero when their element or object is removed
// or the table is written again (or deleted behind egressd's back), into counts that never go
// back, per label (what a metric is about).
type tally[L comparable] struct {
	gone  map[L]Counters      // counts of counters since removed, restarted or relabelled
	last  map[string]Counters // last reading of each counter, by kernel key
	from  map[string]Counters // the reading at which a counter took its current label
	label map[string]L        // the label of each counter, by kernel key
}

func newTally[L comparable]() tally[L] {
	return tally[L]{gone: map[L]Counters{}, last: map[string]Counters{}, from: map[string]Counters{}, label: map[string]L{}}
}

// since is what counter k counted under its current label.
func (t *tally[L]) since(k string) Counters {
	l, f := t.last[k], t.from[k]
	return Counters{Packets: l.Packets - f.Packets, Bytes: l.Bytes - f.Bytes}
}

// retire keeps what counter k counted under its label and starts it again at reading c.
func (t *tally[L]) retire(k string, c Counters) {
	l := t.label[k]
	t.gone[l] = t.gone[l].plus(t.since(k))
	t.last[k], t.from[k] = c, c
}

// observe records a reading: a counter lower than its last reading restarted (its table was
// written again), so what it counted before is kept.
func (t *tally[L]) observe(read map[string]Counters) {
	for k, c := range read {
		if _, ok := t.label[k]; !ok {
			continue
		}
		if last := t.last[k]; c.Packets < last.Packets || c.Bytes < last.Bytes {
			t.retire(k, Counters{})
		}
		t.last[k] = c
	}
}

// relabel makes labels the counters' labels, after a fresh reading. Counters about to go (all
// of them when the table is written again) and those whose label changes keep their counts
// under their old label.
func (t *tally[L]) relabel(labels map[string]L, restart bool) {
	for k, l := range t.label {
		nl, keep := labels[k]
		switch {
		case !keep || restart:
			t.retire(k, Counters{})
			delete(t.last, k)
			delete(t.from, k)
		case nl != l:
			t.retire(k, t.last[k])
		}
	}
	t.label = labels
}

func (t *tally[L]) total() map[L]Counters {
	out := maps.Clone(t.gone)
	for k, l := range t.label {
		out[l] = out[l].plus(t.since(k))
	}
	return out
}

// elementCounters reads the counter of every element of the sets (none when there is no
// table).
func (t *Table) elementCounters(names ...string) map[string]Counters {
	out := map[string]Counters{}
	for _, name := range names {
		es, err := t.conn.GetSetElements(&nftables.Set{Table: table, Name: name})
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

// objectCounters reads the named counters.
func (t *Table) objectCounters() map[string]Counters {
	out := map[string]Counters{}
	objs, err := t.conn.GetObj(&nftables.CounterObj{Table: table})
	if err != nil {
		return out
	}
	for _, o := range objs {
		if c, ok := o.(*nftables.CounterObj); ok {
			out[c.Name] = Counters{Packets: c.Packets, Bytes: c.Bytes}
		}
	}
	return out
}

// readCounters brings every tally up to date with the kernel (before a write, which restarts
// counters). A reader reads only its own tally's counters: a scrape on an egress node reads
// 10,000 SNAT elements once, not once for each of its metrics.
func (t *Table) readCounters() {
	t.readDenies()
	t.readSNAT()
	t.readObjects()
}

func (t *Table) readDenies() {
	t.denyCounts.observe(t.elementCounters(backendDeny4Set, backendDeny6Set))
}

func (t *Table) readSNAT() { t.snatCounts.observe(t.elementCounters(addrs4Set, addrs6Set)) }

func (t *Table) readObjects() { t.objectCounts.observe(t.objectCounters()) }

// Counters are the packets and bytes dropped after DNAT per EgressFirewall rule (the Origin of
// its elements), since the agent started.
func (t *Table) Counters() map[dataplane.Origin]Counters {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.readDenies()
	return t.denyCounts.total()
}

// EgressIPCounters are the packets and bytes that left SNATed to each egress IP this node
// serves (or served), since the agent started.
func (t *Table) EgressIPCounters() map[netip.Addr]Counters {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.readSNAT()
	return t.snatCounts.total()
}

// LeakDrops count what the EgressIP leak guard dropped rather than let leave with a pod
// address.
type LeakDrops struct {
	// Unsteered: unmarked packets of guarded pods to non-exempt destinations, not SNATed.
	Unsteered Counters
	// Misrouted: steered packets about to leave towards no egress node of their mark.
	Misrouted Counters
	// Unknown: packets of other nodes' pods, steered here before this node knew the pod.
	Unknown Counters
}

// FrontendDrops are the packets of firewalled pods to a Service's frontend that no DNAT
// translated, rejected since the agent started.
func (t *Table) FrontendDrops() Counters {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.readObjects()
	return t.objectCounts.total()[frontendDrops]
}

// LeakDrops are the leak guard's drops since the agent started.
func (t *Table) LeakDrops() LeakDrops {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.readObjects()
	c := t.objectCounts.total()
	return LeakDrops{Unsteered: c[leaksCounter], Misrouted: c[misroutedCounter], Unknown: c[unknownCounter]}
}
