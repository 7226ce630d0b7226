package status

import (
	"fmt"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

// BenchmarkTake: a sync's report of 10,000 EgressFirewalls, one of them changed, to a writer
// that wrote the others already: what each report costs the node before anything is written.
func BenchmarkTake(b *testing.B) {
	objects := map[dataplane.Origin]error{}
	for i := range 10000 {
		objects[dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: fmt.Sprintf("scale-%05d", i), Name: "default"}] = nil
	}
	e := &entries{wanted: map[dataplane.Origin]entry{}, written: map[dataplane.Origin]string{},
		recheck: map[dataplane.Origin]bool{}, failures: map[dataplane.Origin]int{}}
	q := newEntryQueue(nil)
	shared := cluster.NewShared(objects) // handed on from sync to sync, as the compile does
	e.take(q, report{objects: cluster.NewOutcomes(shared)}, false, false)
	changed := dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: "scale-00000", Name: "default"}
	i := 0
	for b.Loop() {
		i++
		r := report{objects: cluster.NewOutcomes(shared)}
		if i%2 == 1 {
			r.objects.Set(changed, fmt.Errorf("invalid"))
		}
		e.take(q, r, false, true)
	}
}
