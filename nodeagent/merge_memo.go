package nodeagent

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressip"
)

// mergeMemo keeps what merge derives from an egress node's SNATs (one per pod it serves:
// 10,000 at the scale harness's size) while they stay the same: made again at every sync,
// these copies were half of what an EgressFirewall edit's sync allocated, which the collector
// then scans. Inputs are compared by value, which costs no allocation; the outputs are read
// only, as every list of the state.
type mergeMemo struct {
	snats   derived[[2][]dataplane.SNAT, []dataplane.SNAT]
	remote  derived[remoteInputs, []netip.Addr]
	replied derived[repliesInputs, []dataplane.SteeredPod]
	// exempt and guarded are the unions of the features' lists (and the load balancers' VIPs):
	// the same list while they stay, which the dataplane then compares at no cost.
	exempt  derived[[3][]netip.Prefix, []netip.Prefix]
	guarded derived[[2][]netip.Addr, []netip.Addr]
	// unserved are EgressIP's SNATs and steering without the pods EgressServices serve.
	unserved derived[servedInputs, servedInputs]
	// nodes are the names of the nodes whose pod networks the replies are routed to, in order:
	// sorting 5,000 names was most of the merge of an edit that changed none.
	nodes derived[map[string][]netip.Prefix, []string]
}

// nodesOf are the nodes of podsOf, sorted.
func (m *mergeMemo) nodesOf(podsOf map[string][]netip.Prefix) []string {
	sameKeys := func(a, b map[string][]netip.Prefix) bool {
		return oneMap(a, b) || maps.EqualFunc(a, b, func(_, _ []netip.Prefix) bool { return true })
	}
	return m.nodes.of(podsOf, sameKeys, func(in map[string][]netip.Prefix) []string { return slices.Sorted(maps.Keys(in)) })
}

// exemptUnion is union of the EgressIP, EgressService and VIP lists, in that order.
func (m *mergeMemo) exemptUnion(eip, service, vips []netip.Prefix) []netip.Prefix {
	return m.exempt.of([3][]netip.Prefix{eip, service, vips}, func(a, b [3][]netip.Prefix) bool {
		return equalList(a[0], b[0]) && equalList(a[1], b[1]) && equalList(a[2], b[2])
	}, func(in [3][]netip.Prefix) []netip.Prefix {
		return union(union(in[0], in[1], netip.Prefix.Compare), in[2], netip.Prefix.Compare)
	})
}

// guardedUnion is union of the EgressIP and EgressService lists.
func (m *mergeMemo) guardedUnion(eip, service []netip.Addr) []netip.Addr {
	return m.guarded.of([2][]netip.Addr{eip, service}, func(a, b [2][]netip.Addr) bool {
		return equalList(a[0], b[0]) && equalList(a[1], b[1])
	}, func(in [2][]netip.Addr) []netip.Addr { return union(in[0], in[1], netip.Addr.Compare) })
}

// servedInputs are EgressIP's SNATs and steering, and the addresses EgressServices serve.
type servedInputs struct {
	snat   []dataplane.SNAT
	steer  []cluster.Steer
	served []netip.Addr
}

// withoutServed is withoutServed of p and served: the part's lists are new only when the
// compile made them anew (it copies what it changes) or the served addresses changed.
func (m *mergeMemo) withoutServed(p egressip.Part, served []netip.Addr) egressip.Part {
	lists := m.unserved.of(servedInputs{p.SNAT, p.Steer, served}, func(a, b servedInputs) bool {
		return sameList(a.snat, b.snat) && sameList(a.steer, b.steer) && slices.Equal(a.served, b.served)
	}, func(in servedInputs) servedInputs {
		out := withoutServed(egressip.Part{SNAT: in.snat, Steer: in.steer}, in.served)
		return servedInputs{snat: out.SNAT, steer: out.Steer}
	})
	p.SNAT, p.Steer = lists.snat, lists.steer
	return p
}

type remoteInputs struct {
	snat  []dataplane.SNAT
	local map[netip.Addr]bool
}

type repliesInputs struct {
	remote []netip.Addr
	mark   uint32
}

// derived is one value made from inputs, kept while they stay equal.
type derived[In, Out any] struct {
	in    In
	out   Out
	valid bool
}

// of keeps the latest inputs, also when they equal the last: an input made anew but equal
// (the 5,000 nodes' pod networks, after any Node changed) is compared by value once, and
// found by identity at the next syncs, rather than compared by value at every one.
func (d *derived[In, Out]) of(in In, equal func(a, b In) bool, make func(In) Out) Out {
	if !d.valid || !equal(d.in, in) {
		d.out, d.valid = make(in), true
	}
	d.in = in
	return d.out
}

// snat are the EgressService's SNATs, then EgressIP's.
func (m *mergeMemo) snat(service, egressIP []dataplane.SNAT) []dataplane.SNAT {
	return m.snats.of([2][]dataplane.SNAT{service, egressIP}, func(a, b [2][]dataplane.SNAT) bool {
		return equalList(a[0], b[0]) && equalList(a[1], b[1])
	}, func(in [2][]dataplane.SNAT) []dataplane.SNAT {
		if len(in[0]) == 0 {
			return in[1] // read only: one list, not two
		}
		return append(slices.Clip(in[0]), in[1]...)
	})
}

// remoteSNAT is remoteSNAT of snat (a list snat returned) and local.
func (m *mergeMemo) remoteSNAT(snat []dataplane.SNAT, local map[netip.Addr]bool) []netip.Addr {
	return m.remote.of(remoteInputs{snat, local}, func(a, b remoteInputs) bool {
		return sameList(a.snat, b.snat) && maps.Equal(a.local, b.local)
	}, func(in remoteInputs) []netip.Addr { return remoteSNAT(in.snat, in.local) })
}

// replies are the reply entries of the remote pods, marked with mark.
func (m *mergeMemo) replies(remote []netip.Addr, mark uint32) []dataplane.SteeredPod {
	return m.replied.of(repliesInputs{remote, mark}, func(a, b repliesInputs) bool {
		return sameList(a.remote, b.remote) && a.mark == b.mark
	}, func(in repliesInputs) []dataplane.SteeredPod {
		out := make([]dataplane.SteeredPod, 0, len(in.remote))
		for _, pod := range in.remote {
			out = append(out, dataplane.SteeredPod{Pod: pod, Mark: in.mark})
		}
		return out
	})
}

// sameList says whether a and b are one list: the memo's own outputs, handed in again.
func sameList[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// equalList says whether a and b hold the same, at no cost when they are one list (a part
// handed on from the last sync).
func equalList[T comparable](a, b []T) bool { return sameList(a, b) || slices.Equal(a, b) }

// oneMap says whether a and b are one map (a part handed on from the last sync).
func oneMap[K comparable, V any](a, b map[K]V) bool {
	return len(a) == len(b) && reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
