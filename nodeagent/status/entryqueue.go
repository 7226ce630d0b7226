package status

import (
	"sync"

	"github.com/egressd/egressd/dataplane"
)

// entryQueue orders the status entries a node's writers take, as client-go's workqueue does
// (each object queued once however often it changes, and one being written that changes
// meanwhile queued again when its write ends), with two lanes: entries a report changed after
// the writer's first pass go ahead of that pass's backlog, as controller-runtime's priority
// queue puts events ahead of its initial list. An agent starting on a cluster with ten
// thousand firewalls writes an entry for each; a firewall created meanwhile is not kept
// waiting behind them.
type entryQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	lanes   [2][]dataplane.Origin // urgent, backlog: FIFO; an origin promoted since stays in backlog, stale
	queued  map[dataplane.Origin]bool
	urgent  map[dataplane.Origin]bool // of queued: in the urgent lane
	active  map[dataplane.Origin]bool // being written
	again   map[dataplane.Origin]bool // added while active: queued when done, urgent if true
	stopped bool
	metrics *Metrics // its pending gauge: how many are queued
	peak    int      // most queued since the maps were made: a map keeps its size once grown
}

// shrinkAfter is how many queued origins make the queue's maps worth making anew once it
// drains: a first pass over ten thousand firewalls would keep a megabyte otherwise.
const shrinkAfter = 1024

func newEntryQueue(m *Metrics) *entryQueue {
	q := &entryQueue{metrics: m, queued: map[dataplane.Origin]bool{}, urgent: map[dataplane.Origin]bool{},
		active: map[dataplane.Origin]bool{}, again: map[dataplane.Origin]bool{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// add queues o, in the urgent lane if urgent; an origin in the backlog is promoted.
func (q *entryQueue) add(o dataplane.Origin, urgent bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	if q.active[o] {
		q.again[o] = q.again[o] || urgent
		return
	}
	q.push(o, urgent)
}

// push is add for an origin not being written. q.mu held.
func (q *entryQueue) push(o dataplane.Origin, urgent bool) {
	if q.queued[o] && (q.urgent[o] || !urgent) {
		return
	}
	lane := 1
	if urgent {
		lane = 0
		q.urgent[o] = true
	}
	q.queued[o] = true
	q.peak = max(q.peak, len(q.queued))
	q.metrics.setPending(len(q.queued))
	q.lanes[lane] = append(q.lanes[lane], o)
	q.cond.Signal()
}

// get waits for the next origin to write, urgent first, and marks it active until done; it
// tells whether it was urgent. It reports false once the queue is stopped.
func (q *entryQueue) get() (o dataplane.Origin, urgent, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.stopped {
			return dataplane.Origin{}, false, false
		}
		for lane := range q.lanes {
			for len(q.lanes[lane]) > 0 {
				o := q.lanes[lane][0]
				q.lanes[lane][0] = dataplane.Origin{} // no reference kept by the backing array
				q.lanes[lane] = q.lanes[lane][1:]
				if !q.queued[o] || (lane == 1 && q.urgent[o]) {
					continue // promoted: taken from the urgent lane
				}
				delete(q.queued, o)
				q.metrics.setPending(len(q.queued))
				delete(q.urgent, o)
				q.drained()
				q.active[o] = true
				return o, lane == 0, true
			}
		}
		q.drained()
		q.cond.Wait()
	}
}

// done ends o's write; o is queued again if it was added meanwhile.
func (q *entryQueue) done(o dataplane.Origin) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.active, o)
	if urgent, ok := q.again[o]; ok {
		delete(q.again, o)
		if !q.stopped {
			q.push(o, urgent)
		}
	}
}

// drained lets go of what a long queue grew once it is empty: the lanes' arrays (a drained
// lane still points into its array) and the maps. q.mu held.
func (q *entryQueue) drained() {
	for lane := range q.lanes {
		if len(q.lanes[lane]) == 0 {
			q.lanes[lane] = nil
		}
	}
	if len(q.queued) == 0 && q.peak > shrinkAfter {
		q.queued, q.urgent, q.peak = map[dataplane.Origin]bool{}, map[dataplane.Origin]bool{}, 0
	}
}

// stop wakes every get, which then reports false; later adds are ignored.
func (q *entryQueue) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	q.cond.Broadcast()
}
