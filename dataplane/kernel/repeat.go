package kernel

import (
	"maps"
	"reflect"
	"time"

	"github.com/egressd/egressd/dataplane"
)

// An Apply of the state the last one applied, with nothing told of the kernel since, has
// nothing to write, not even to the classifier and attach, which run at every other Apply.
// The sync loop syncs after every change it watches, and many change nothing of the node's
// state: a new pod's object, before it has an address, and its status once its CNI ADD
// announced it; a deleted pod's object after its CNI DEL. Two of the five syncs of a pod
// started one at a time were such; each computed every pod's entries and looked at every pod
// interface's hooks again.

// lastApply is the last Apply that ran in full or in part and failed nothing: its state (read
// only once handed to Apply) and result.
type lastApply struct {
	state *dataplane.State
	res   dataplane.Result
	at    time.Time
}

// attachLook is the longest Applies are repeats since the last that ran: attach looks again
// for another program added after egressd's at the pods' hooks at most once a minute
// (dataplane/tc), at the Applies that run.
const attachLook = time.Minute

// repeat returns the last Apply's result if s is its state, the last Apply failed nothing,
// nothing was told of the kernel since (full, poked) and it ran less than attachLook ago. Every
// facility is counted as skipped.
func (d *Applier) repeat(s *dataplane.State, full, poked bool) (dataplane.Result, bool) {
	l := d.last
	if full || poked || l.state == nil || time.Since(l.at) >= attachLook || !reflect.DeepEqual(l.state, s) {
		return dataplane.Result{}, false
	}
	for _, f := range d.facilities {
		d.metrics.skipped.WithLabelValues(f.name()).Inc()
	}
	res := l.res
	// The caller may add to them (the sync loop's unplaced paths).
	res.Failed, res.Conflicts = map[dataplane.Origin]error{}, maps.Clone(l.res.Conflicts)
	return res, true
}

// ran remembers an Apply that ran, if it failed nothing.
func (d *Applier) ran(s *dataplane.State, res dataplane.Result, at time.Time) {
	d.last = lastApply{}
	if len(res.Failed) == 0 && len(res.Removals) == 0 {
		// A copy of the struct: a field of the state set anew after it was applied is a
		// change (its lists are read only, and compared by identity first).
		kept := *s
		res.Conflicts = maps.Clone(res.Conflicts)
		d.last = lastApply{state: &kept, res: res, at: at}
	}
}
