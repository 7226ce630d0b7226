package cluster

import (
	"errors"
	"maps"
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
	out := NewOutcomes(shared)
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
