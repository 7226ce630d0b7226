package status

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// A report over the statuses the last one shared is taken where either sets an outcome; it
// wants and queues what a look at every entry wants and queues, as reports come and go over
// statuses handed on or made anew.
func TestTakeInPartAsInFull(t *testing.T) {
	newEntries := func() *entries {
		return &entries{wanted: map[dataplane.Origin]entry{}, written: map[dataplane.Origin]string{},
			recheck: map[dataplane.Origin]bool{}, failures: map[dataplane.Origin]int{}}
	}
	queued := func(q *entryQueue) map[dataplane.Origin]bool {
		out := map[dataplane.Origin]bool{}
		for len(q.queued) > 0 {
			o, _, _ := q.get()
			q.done(o)
			out[o] = true
		}
		return out
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	bad := errors.New("bad")
	originOf := func() dataplane.Origin {
		kind := []dataplane.Kind{cluster.KindEgressFirewall, cluster.KindEgressQoS, cluster.KindEgressIP}[rnd.IntN(3)]
		return dataplane.Origin{Kind: kind, Namespace: fmt.Sprint(rnd.IntN(6)), Name: "default"}
	}
	errOf := func() error { return []error{nil, nil, bad, errors.New("worse")}[rnd.IntN(4)] }
	part, full := newEntries(), newEntries()
	qPart, qFull := newEntryQueue(nil), newEntryQueue(nil)
	var shared *cluster.Shared
	for step := range 500 {
		if shared == nil || rnd.IntN(5) == 0 { // the statuses changed: handed on anew
			all := map[dataplane.Origin]error{}
			for range rnd.IntN(8) {
				all[dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: fmt.Sprint(rnd.IntN(6)), Name: "default"}] = errOf()
			}
			shared = cluster.NewShared(all)
		}
		// The reference lies over another handing on of the same statuses: looked at in full.
		objects, fresh := cluster.NewOutcomes(shared), cluster.NewOutcomes(cluster.NewShared(shared.All))
		for range rnd.IntN(5) {
			o, err := originOf(), errOf()
			objects.Set(o, err)
			fresh.Set(o, err)
		}
		var notes map[dataplane.Origin]string // a namespace's DNS answers capped, now and then
		for range rnd.IntN(3) {
			if notes == nil {
				notes = map[dataplane.Origin]string{}
			}
			notes[dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: fmt.Sprint(rnd.IntN(6)), Name: "default"}] = []string{"capped", "full"}[rnd.IntN(2)]
		}
		part.take(qPart, report{objects: objects, notes: notes}, false, false)
		full.take(qFull, report{objects: fresh, notes: notes}, false, false)
		if !maps.Equal(part.wanted, full.wanted) {
			t.Fatalf("step %d: wanted %v, a look at every entry wants %v", step, part.wanted, full.wanted)
		}
		if got, want := queued(qPart), queued(qFull); !maps.Equal(got, want) {
			t.Fatalf("step %d: queued %v, a look at every entry queues %v", step, got, want)
		}
	}
}

// A recheck before any sync reported takes the empty report: nothing to write.
func TestTakeEmptyReport(t *testing.T) {
	e := &entries{wanted: map[dataplane.Origin]entry{}, written: map[dataplane.Origin]string{},
		recheck: map[dataplane.Origin]bool{}, failures: map[dataplane.Origin]int{}}
	q := newEntryQueue(nil)
	e.take(q, report{}, true, false)
	e.take(q, report{}, false, false)
	if len(e.wanted) != 0 || len(q.queued) != 0 {
		t.Errorf("wanted %v, queued %v", e.wanted, q.queued)
	}
}
