package cluster

import (
	"iter"

	"github.com/egressd/egressd/dataplane"
)

// Outcomes are the objects a sync reports on, each with what failed of it (nil: in force).
// Most are the EgressFirewalls' statuses, which the compile hands on unchanged from sync to
// sync (shared, read only); what a sync sets lies over them. A report on 10,000 firewalls
// copies none of them: the copy was a quarter of what an edit's sync allocated.
type Outcomes struct {
	shared map[dataplane.Origin]error
	own    map[dataplane.Origin]error
}

// NewOutcomes reports on the objects of shared, which it never changes.
func NewOutcomes(shared map[dataplane.Origin]error) Outcomes {
	return Outcomes{shared: shared, own: map[dataplane.Origin]error{}}
}

// Get is o's outcome, and whether o is reported on.
func (out Outcomes) Get(o dataplane.Origin) (error, bool) {
	if err, ok := out.own[o]; ok {
		return err, true
	}
	err, ok := out.shared[o]
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
		for o, err := range out.shared {
			if _, over := out.own[o]; over {
				continue
			}
			if !yield(o, err) {
				return
			}
		}
	}
}
