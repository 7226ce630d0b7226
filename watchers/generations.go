package watchers

import (
	"maps"
	"reflect"
	"slices"
	"sync/atomic"
)

// Generations counts, per kind of object, the changes the caches took that a consumer may
// depend on (as Subscribe: status-only updates of the egress API objects do not count), so that
// a compile step whose inputs did not change can reuse its last result.
type Generations struct {
	counts map[reflect.Type]*atomic.Uint64
	// offsets are changes counted outside the caches (Adding).
	offsets map[reflect.Type]uint64
	// journals keep the keys of the changed objects of some kinds (Journaled).
	journals map[reflect.Type]*journal
	// overlaid are the keys of the objects an overlay lists instead of the caches (Adding).
	overlaid map[reflect.Type][]string
}

// Adding returns generations that also count n changes of kind made outside the caches: n
// counts the changes of an overlay over them (the pods the CNI plugin announced, in a
// snapshot whose pod lister adds them), so that a result kept under a generation of kind is
// not kept across a change of the overlay. keys are the objects the overlay lists now
// (Overlaid): its changes are in no journal.
func (g *Generations) Adding(kind any, n uint64, keys ...string) *Generations {
	if g == nil {
		return nil
	}
	out := &Generations{counts: g.counts, offsets: maps.Clone(g.offsets), journals: g.journals, overlaid: maps.Clone(g.overlaid)}
	if out.offsets == nil {
		out.offsets = map[reflect.Type]uint64{}
	}
	t := reflect.TypeOf(kind)
	out.offsets[t] += n
	if len(keys) > 0 {
		if out.overlaid == nil {
			out.overlaid = map[reflect.Type][]string{}
		}
		out.overlaid[t] = append(slices.Clip(out.overlaid[t]), keys...)
	}
	return out
}

// Overlaid returns the keys of the objects of kind an overlay lists instead of the caches. A
// consumer that follows the journal (ChangedSince) looks at these, and at those it was told
// of the last time, as changed: the overlay's changes are in no journal.
func (g *Generations) Overlaid(kind any) []string {
	if g == nil {
		return nil
	}
	return g.overlaid[reflect.TypeOf(kind)]
}

// NewGenerations counts the changes of the given kinds (pointers to their Go types).
func NewGenerations(kinds ...any) *Generations {
	g := &Generations{counts: map[reflect.Type]*atomic.Uint64{}}
	for _, k := range kinds {
		g.counts[reflect.TypeOf(k)] = &atomic.Uint64{}
	}
	return g
}

// Of returns a number that changes whenever an object of one of the kinds (given as pointers to
// their Go types, as &corev1.Node{}) changed, and false when g is nil or a kind is not watched
// (never equal to another answer then). Read it before reading the caches: a change that lands
// in between makes the next answer differ, so the result read is never kept under a number
// that hides a change.
func (g *Generations) Of(kinds ...any) (uint64, bool) {
	if g == nil {
		return 0, false
	}
	var sum uint64 // counters only grow: the sum moves when any of them does
	for _, k := range kinds {
		c := g.counts[reflect.TypeOf(k)]
		if c == nil {
			return 0, false
		}
		sum += c.Load() + g.offsets[reflect.TypeOf(k)]
	}
	return sum, true
}
