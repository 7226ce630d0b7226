package status

import (
	"fmt"
	"slices"
	"testing"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
)

func fw(ns string) dataplane.Origin {
	return dataplane.Origin{Kind: cluster.KindEgressFirewall, Namespace: ns, Name: "default"}
}

// take gets n origins, each done at once, and names their namespaces in order.
func take(t *testing.T, q *entryQueue, n int) []string {
	t.Helper()
	var out []string
	for range n {
		o, _, ok := q.get()
		if !ok {
			t.Fatal("queue stopped")
		}
		q.done(o)
		out = append(out, o.Namespace)
	}
	return out
}

func TestEntryQueueOrder(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(q *entryQueue)
		want []string
	}{
		{"backlog in order, each once", func(q *entryQueue) {
			q.add(fw("a"), false)
			q.add(fw("b"), false)
			q.add(fw("a"), false)
		}, []string{"a", "b"}},
		{"urgent ahead of the backlog", func(q *entryQueue) {
			q.add(fw("a"), false)
			q.add(fw("b"), false)
			q.add(fw("new"), true)
		}, []string{"new", "a", "b"}},
		{"a backlog entry made urgent moves ahead, once", func(q *entryQueue) {
			q.add(fw("a"), false)
			q.add(fw("b"), false)
			q.add(fw("b"), true)
			q.add(fw("b"), false) // stays urgent
		}, []string{"b", "a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := newEntryQueue(nil)
			c.do(q)
			got := take(t, q, len(c.want))
			if !slices.Equal(got, c.want) {
				t.Fatalf("taken %v, want %v", got, c.want)
			}
			q.add(fw("last"), false)
			if o, _, _ := q.get(); o.Namespace != "last" {
				t.Fatalf("after %v: %s left in the queue, want only last", got, o.Namespace)
			}
		})
	}
}

// An entry changed while it is written is not written twice at once; it is queued again when
// its write ends, in the lane it was added to.
func TestEntryQueueAddedWhileActive(t *testing.T) {
	q := newEntryQueue(nil)
	q.add(fw("a"), false)
	q.add(fw("b"), false)
	a, _, _ := q.get()
	q.add(fw("a"), true)
	if o, _, _ := q.get(); o.Namespace != "b" {
		t.Fatalf("took %s while a was written, want b", o.Namespace)
	}
	q.done(fw("b"))
	q.done(a)
	o, urgent, _ := q.get()
	if o.Namespace != "a" || !urgent {
		t.Fatalf("after a's write: took %s (urgent %v), want a, urgent", o.Namespace, urgent)
	}
	q.done(o)
	q.stop()
	if _, _, ok := q.get(); ok {
		t.Fatal("get after stop reported an entry")
	}
}

// A queue that drained a first pass over thousands of firewalls lets go of the arrays and maps
// it grew for them, and keeps ordering what comes after.
func TestEntryQueueDrainedLetsGo(t *testing.T) {
	q := newEntryQueue(nil)
	for i := range 2 * shrinkAfter {
		q.add(fw(fmt.Sprint(i)), i%2 == 0) // promoted ones leave stale origins in the backlog
		if i%3 == 0 {
			q.add(fw(fmt.Sprint(i)), true)
		}
	}
	if got := take(t, q, 2*shrinkAfter); len(got) != 2*shrinkAfter {
		t.Fatalf("took %d", len(got))
	}
	q.mu.Lock()
	lanes, peak := q.lanes, q.peak
	q.mu.Unlock()
	if lanes[0] != nil || lanes[1] != nil || peak != 0 {
		t.Errorf("after draining: lanes of %d and %d, peak %d; want none kept", cap(lanes[0]), cap(lanes[1]), peak)
	}
	q.add(fw("b"), false)
	q.add(fw("a"), true)
	if got := take(t, q, 2); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("after draining: %v, want [a b]", got)
	}
}
