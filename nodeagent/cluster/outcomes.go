package cluster

import (
	"iter"

	"github.com/egressd/egressd/dataplane"
)

// Shared are outcomes a compile hands on unchanged from sync to sync (the EgressFirewalls'
// statuses), read only, with what a sync's report needs of them made once: those that fail,
// and how many there are of each kind. A report walks its own outcomes and the failures;
// the 10,000 firewalls in force it counts and leaves.
type Shared struct {
	All     map[dataplane.Origin]error
	failing []dataplane.Origin
	kinds   map[dataplane.Kind]int
}

// NewShared are the outcomes of all, which no one changes afterwards.
func NewShared(all map[dataplane.Origin]error) *Shared {
	s := &Shared{All: all, kinds: map[dataplane.Kind]int{}}
	for o, err := range all {
		s.kinds[o.Kind]++
		if err != nil {
			s.failing = append(s.failing, o)
		}
	}
	return s
}

// Outcomes are the objects a sync reports on, each with what failed of it (nil: in force):
// the shared ones, and what the sync sets over them. The zero Outcomes reports on none.
type Outcomes struct {
	shared *Shared
	own    map[dataplane.Origin]error
}

// NewOutcomes reports on the objects of shared (nil: none).
func NewOutcomes(shared *Shared) Outcomes {
	return Outcomes{shared: shared, own: map[dataplane.Origin]error{}}
}

// none are no shared outcomes.
var none = &Shared{}

// common are the shared outcomes (none when nil).
func (out Outcomes) common() *Shared {
	if out.shared == nil {
		return none
	}
	return out.shared
}

// Get is o's outcome, and whether o is reported on.
func (out Outcomes) Get(o dataplane.Origin) (error, bool) {
	if err, ok := out.own[o]; ok {
		return err, true
	}
	err, ok := out.common().All[o]
	return err, ok
}

// Set reports on o with err.
func (out Outcomes) Set(o dataplane.Origin, err error) { out.own[o] = err }

// All are the outcomes, each object once.
func (out Outcomes) All() iter.Seq2[dataplane.Origin, error] {
	return func(yield func(dataplane.Origin, error) bool) {
		for o, err := range out.own {
			if !yield(o, err) {
				return
			}
		}
		for o, err := range out.common().All {
			if _, over := out.own[o]; over {
				continue
			}
			if !yield(o, err) {
				return
			}
		}
	}
}

// Failures are the outcomes with an error, each object once.
func (out Outcomes) Failures() iter.Seq2[dataplane.Origin, error] {
	return func(yield func(dataplane.Origin, error) bool) {
		for o, err := range out.own {
			if err != nil && !yield(o, err) {
				return
			}
		}
		shared := out.common()
		for _, o := range shared.failing {
			if _, over := out.own[o]; over {
				continue
			}
			if !yield(o, shared.All[o]) {
				return
			}
		}
	}
}

// Tally counts the outcomes of each kind: in force, and failed.
func (out Outcomes) Tally() (inForce, failed map[dataplane.Kind]int) {
	inForce, failed = map[dataplane.Kind]int{}, map[dataplane.Kind]int{}
	shared := out.common()
	for k, n := range shared.kinds {
		inForce[k] += n
	}
	for _, o := range shared.failing {
		inForce[o.Kind]-- // counted below, failed or as set over
		if _, over := out.own[o]; !over {
			failed[o.Kind]++
		}
	}
	for o, err := range out.own {
		if was, common := shared.All[o]; common && was == nil {
			inForce[o.Kind]-- // counted as set over
		}
		if err == nil {
			inForce[o.Kind]++
		} else {
			failed[o.Kind]++
		}
	}
	return inForce, failed
}

// Since are the objects whose outcome may differ from last's, when both lie over the same
// shared outcomes: those either sets. ok is false when they do not (every object may differ).
func (out Outcomes) Since(last Outcomes) (objects iter.Seq[dataplane.Origin], ok bool) {
	if last.shared != out.shared || out.shared == nil || last.own == nil {
		return nil, false
	}
	return func(yield func(dataplane.Origin) bool) {
		for o := range out.own {
			if !yield(o) {
				return
			}
		}
		for o := range last.own {
			if _, both := out.own[o]; !both && !yield(o) {
				return
			}
		}
	}, true
}
