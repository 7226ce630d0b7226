package cluster

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/egressd/egressd/dataplane"
)

// What a sync sets lies over the shared statuses, which stay as they were; each object is
// listed once.
func TestOutcomes(t *testing.T) {
	a, b, c := dataplane.Origin{Kind: KindEgressFirewall, Namespace: "a", Name: "default"},
		dataplane.Origin{Kind: KindEgressFirewall, Namespace: "b", Name: "default"},
		dataplane.Origin{Kind: KindEgressQoS, Namespace: "c", Name: "default"}
	bad := errors.New("bad")
	shared := map[dataplane.Origin]error{a: nil, b: nil}
	out := NewOutcomes(NewShared(shared))
	out.Set(b, bad)
	out.Set(c, nil)
	if got := maps.Collect(out.All()); !maps.Equal(got, map[dataplane.Origin]error{a: nil, b: bad, c: nil}) {
		t.Errorf("all %v", got)
	}
	if err, ok := out.Get(b); err != bad || !ok {
		t.Errorf("b: %v, %v", err, ok)
	}
	if _, ok := out.Get(dataplane.Origin{Kind: KindEgressIP, Name: "none"}); ok {
		t.Error("an object never reported on is reported on")
	}
	if shared[b] != nil || len(shared) != 2 {
		t.Errorf("the shared statuses changed: %v", shared)
	}
}

// Failures, Tally and Since, which walk the sync's own outcomes and the shared failures alone,
// say what a walk of every outcome says, whatever the sync sets over the shared ones.
func TestOutcomesWalkedInPart(t *testing.T) {
	bad, worse := errors.New("bad"), errors.New("worse")
	kinds := []dataplane.Kind{KindEgressFirewall, KindEgressQoS, KindEgressIP}
	rnd := rand.New(rand.NewPCG(1, 2))
	errOf := func() error { return []error{nil, nil, bad, worse}[rnd.IntN(4)] }
	originOf := func() dataplane.Origin {
		return dataplane.Origin{Kind: kinds[rnd.IntN(len(kinds))], Namespace: fmt.Sprint(rnd.IntN(8)), Name: "default"}
	}
	for trial := range 300 {
		all := map[dataplane.Origin]error{}
		for range rnd.IntN(12) {
			all[originOf()] = errOf()
		}
		shared := NewShared(all)
		sets := func() Outcomes {
			out := NewOutcomes(shared)
			for range rnd.IntN(6) {
				out.Set(originOf(), errOf())
			}
			return out
		}
		last, out := sets(), sets()

		wantFailures := map[dataplane.Origin]error{}
		wantInForce, wantFailed := map[dataplane.Kind]int{}, map[dataplane.Kind]int{}
		for o, err := range out.All() {
			if err != nil {
				wantFailures[o] = err
				wantFailed[o.Kind]++
			} else {
				wantInForce[o.Kind]++
			}
		}
		if got := maps.Collect(out.Failures()); !maps.Equal(got, wantFailures) {
			t.Fatalf("trial %d: failures %v, want %v", trial, got, wantFailures)
		}
		inForce, failed := out.Tally()
		maps.DeleteFunc(inForce, func(_ dataplane.Kind, n int) bool { return n == 0 })
		maps.DeleteFunc(failed, func(_ dataplane.Kind, n int) bool { return n == 0 })
		if !maps.Equal(inForce, wantInForce) || !maps.Equal(failed, wantFailed) {
			t.Fatalf("trial %d: tally %v in force, %v failed; want %v, %v", trial, inForce, failed, wantInForce, wantFailed)
		}

		since, ok := out.Since(last)
		if !ok {
			t.Fatalf("trial %d: two outcomes over the same shared ones: not compared", trial)
		}
		walked := map[dataplane.Origin]bool{}
		for o := range since {
			walked[o] = true
		}
		for o, err := range out.All() {
			if was, had := last.Get(o); (!had || was != err) && !walked[o] {
				t.Fatalf("trial %d: %v changed (%v -> %v) but is not walked", trial, o, was, err)
			}
		}
		for o := range last.All() {
			if _, has := out.Get(o); !has && !walked[o] {
				t.Fatalf("trial %d: %v went but is not walked", trial, o)
			}
		}
		if _, ok := out.Since(NewOutcomes(NewShared(maps.Clone(all)))); ok {
			t.Fatalf("trial %d: outcomes over another handing on of the shared ones compared in part", trial)
		}
	}
}

// The zero Outcomes (a writer's report before the first sync's) reports on nothing.
func TestOutcomesZero(t *testing.T) {
	var out Outcomes
	if n := len(maps.Collect(out.All())) + len(maps.Collect(out.Failures())); n != 0 {
		t.Errorf("%d outcomes", n)
	}
	if inForce, failed := out.Tally(); len(inForce)+len(failed) != 0 {
		t.Errorf("tally %v, %v", inForce, failed)
	}
	if _, ok := out.Get(dataplane.Origin{Kind: KindEgressFirewall}); ok {
		t.Error("an object reported on")
	}
	if _, ok := out.Since(Outcomes{}); ok {
		t.Error("two zero outcomes compared in part")
	}
}
