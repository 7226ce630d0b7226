package watchers

import (
	"reflect"
	"strconv"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
)

// Marks follow, for some kinds, how far the caches have come: the newest resourceVersion an
// event of the kind carried, and how many of those events changed more than the status. A
// node reports, per kind, the resourceVersion up to which its dataplane holds every change
// (NodeReport's programmed); the controller compares it with the resourceVersion at which an
// object took its generation (comparable: KEP-5504), instead of each node writing an entry
// into each object.
type Marks struct {
	kinds map[reflect.Type]*mark
	moved chan struct{} // one pending signal: a mark moved
}

type mark struct {
	specs atomic.Uint64 // events that changed more than the status
	seen  atomic.Uint64 // newest resourceVersion of any event, status-only ones too
}

// NewMarks follows the given kinds (pointers to their Go types).
func NewMarks(kinds ...any) *Marks {
	m := &Marks{kinds: map[reflect.Type]*mark{}, moved: make(chan struct{}, 1)}
	for _, k := range kinds {
		m.kinds[reflect.TypeOf(k)] = &mark{}
	}
	return m
}

// Observe counts an event of obj, of kind, after the cache holds it (the informers' handlers). The count comes first: a
// reader that sees the resourceVersion then sees the count it moved (Captured.Through).
func (m *Marks) Observe(kind, obj any, spec bool) {
	if m == nil {
		return
	}
	k := m.kinds[reflect.TypeOf(kind)]
	if k == nil {
		return
	}
	if spec {
		k.specs.Add(1)
	}
	o, err := meta.Accessor(obj)
	if err != nil {
		return // a tombstone: its resourceVersion is not the deletion's
	}
	rv, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	for {
		cur := k.seen.Load()
		if rv <= cur {
			return
		}
		if k.seen.CompareAndSwap(cur, rv) {
			break
		}
	}
	select {
	case m.moved <- struct{}{}:
	default:
	}
}

// Moved receives a value after a mark moved since the last receive (for one consumer: the
// node's reporter, whose report may move with it though no sync ran).
func (m *Marks) Moved() <-chan struct{} { return m.moved }

// Captured is what the caches held when a sync began reading them.
type Captured struct {
	marks *Marks
	at    map[reflect.Type][2]uint64 // specs, seen
}

// Capture records the marks; call it before reading the caches.
func (m *Marks) Capture() Captured {
	c := Captured{marks: m, at: map[reflect.Type][2]uint64{}}
	if m == nil {
		return c
	}
	for t, k := range m.kinds {
		specs := k.specs.Load()
		c.at[t] = [2]uint64{specs, k.seen.Load()}
	}
	return c
}

// Through returns the resourceVersion of kind up to which every change was in the caches when
// c was captured, and so is in what was compiled from them: the newest seen then or, if no
// change of more than the status arrived since, the newest seen now (a status written since,
// by the controller, needs no sync to be covered). Zero: nothing known.
func (c Captured) Through(kind any) uint64 {
	t := reflect.TypeOf(kind)
	at, ok := c.at[t]
	if !ok {
		return 0
	}
	k := c.marks.kinds[t]
	seen := k.seen.Load() // before specs: a spec change it covers has been counted (observe)
	if k.specs.Load() == at[0] {
		return seen
	}
	return at[1]
}
