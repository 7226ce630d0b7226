package kernel

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestRecheckHooks: a tc deletion on an interface egressd keeps attached (or one of unknown
// interface: 0) makes the next attach look at its hooks again and asks for a sync at once;
// another within recheckGap is paced (no sync asked at once); one on an interface egressd does
// not keep (its own detaching, or another's) is no news.
func TestRecheckHooks(t *testing.T) {
	var asked atomic.Int32 // the paced sync comes from a timer, after the test
	a := &attachFacility{recheck: map[int]bool{}, kept: map[int]bool{5: true}, ask: func() { asked.Add(1) }}
	asks := func() int32 { return asked.Load() }
	a.recheckHooks(7)
	if asks() != 0 || len(a.recheck) != 0 {
		t.Fatalf("a deletion on an interface not kept: %d syncs asked, recheck %v", asks(), a.recheck)
	}
	a.recheckHooks(5)
	if asks() != 1 || !a.recheck[5] {
		t.Fatalf("a deletion on a kept interface: %d syncs asked, recheck %v; want 1, [5]", asks(), a.recheck)
	}
	a.recheckHooks(0)
	a.recheckMu.Lock()
	defer a.recheckMu.Unlock()
	if asks() != 1 || !a.recheck[0] || !a.recheckDue {
		t.Errorf("a second deletion at once: %d syncs asked (want 1), recheck %v, due %v (want a paced sync)", asks(), a.recheck, a.recheckDue)
	}
	if since := time.Since(a.recheckAsked); since > recheckGap {
		t.Errorf("the sync asked was not recorded (%v ago)", since)
	}
}
