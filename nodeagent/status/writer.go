package status

import (
	"context"
	"iter"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// leaderManager is the field manager of the aggregate status the leader writes.
const leaderManager = "egressd-leader"

// entryWriter writes this node's status entry of one kind of object: its failure, else its
// success with the note, if any, appended. It tells whether it asked the API server (not when
// the entry already said it, or the object is gone).
type entryWriter func(ctx context.Context, w *Writer, o dataplane.Origin, failure error, note string) (bool, error)

// entryWriters are the kinds that get a per-node status entry.
var entryWriters = map[dataplane.Kind]entryWriter{
	cluster.KindEgressFirewall: writeFirewallEntry,
	cluster.KindEgressQoS:      writeQoSEntry,
	cluster.KindExternalRoute:  writeRouteEntry,
}

// byOutcome are the kinds whose entry is a function of the sync's outcome alone: an outcome
// written before need not be looked at again until the object changes (an AdminPolicyBased-
// ExternalRoute's entry lists its gateways, which pods and namespaces change).
var byOutcome = map[dataplane.Kind]bool{cluster.KindEgressFirewall: true, cluster.KindEgressQoS: true}

// Writer reports, for this node, what the last sync applied: one entry per object,
// written with server-side apply under the node's name as field manager, so that every node
// owns exactly its own entry. Writes run on their own goroutines, from a queue (entryQueue):
// a slow API server never holds the dataplane back, only the latest wanted status of an
// object is written, and what changed after the first report goes ahead of its backlog.
type Writer struct {
	Node     string
	Client   versioned.Interface
	Kube     kubernetes.Interface
	Snapshot *watchers.Snapshot
	Recorder record.EventRecorder
	Log      *slog.Logger
	// Changed, when set, signals status changes made by others: the last outcome is written
	// again where an entry of this node went missing or stale.
	Changed <-chan struct{}
	// ChangedObjects, when set, names the objects that changed since it was last called
	// (watchers.Changes.Take), whose entries alone are looked at again; all: every entry.
	ChangedObjects func() (objects []watchers.ChangedObject, all bool)
	// RouteGateways lists the gateways an AdminPolicyBasedExternalRoute configures now, which
	// its success entry names (externalroute.ConfiguredGateways: the feature computes them,
	// this package only writes).
	RouteGateways func(snap *watchers.Snapshot, policy string) ([]netip.Addr, error)
	Metrics       *Metrics // optional

	pending     chan report
	pendingOnce sync.Once // Run and Report start concurrently
}

// coalesce is how long the writer lets newer reports replace one before it looks at it.
const coalesce = 50 * time.Millisecond

// recheckDelay gathers the changes of the objects before the writer looks at every entry again:
// its own writes are such changes, and an agent writing a backlog of 10,000 entries looked at
// all 10,000 after each one (a third of its CPU at full size, its profile).
const recheckDelay = time.Second

// parallelWrites bounds the entries written at once: each is a request whose time is mostly the
// round trip, and one at a time an agent wrote about 7 a second (10,000 firewalls: 25 minutes);
// the client's rate limit still bounds the rate.
const parallelWrites = 8

// A failed write of an entry is tried again after retryMin, doubling up to retryMax.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// report is one sync's outcome: per-object failures and notes, and the node's host addresses.
type report struct {
	objects   cluster.Outcomes
	notes     map[dataplane.Origin]string
	hostCIDRs []netip.Prefix
}

// entry is what a report wants an object's entry to say.
type entry struct {
	failure error
	note    string
	outcome string // failure and note as one comparable string
}

// entries is the writer's state between reports and the writes in flight.
type entries struct {
	mu     sync.Mutex
	wanted map[dataplane.Origin]entry
	// written are the outcomes written (or found in place), of the kinds byOutcome: a sync's
	// report looks again only at what changed (a thousand firewalls, and a report after every
	// pod's sync).
	written map[dataplane.Origin]string
	// recheck are the entries to write even if written says so: a change of the objects
	// themselves (another writer may have removed an entry) looks at all of them again.
	recheck  map[dataplane.Origin]bool
	failures map[dataplane.Origin]int // consecutive failed writes, for the retry's wait
	// last is the report last taken: the next, over the same shared statuses, is compared
	// with it where either sets an outcome (cluster.Outcomes.Since), not entry by entry.
	last report
}

// Run writes reported statuses until ctx ends.
func (w *Writer) Run(ctx context.Context) {
	e := &entries{wanted: map[dataplane.Origin]entry{}, written: map[dataplane.Origin]string{},
		recheck: map[dataplane.Origin]bool{}, failures: map[dataplane.Origin]int{}}
	q := newEntryQueue(w.Metrics)
	var writers sync.WaitGroup
	defer writers.Wait()
	defer q.stop()
	for range parallelWrites {
		writers.Go(func() { w.write(ctx, q, e) })
	}
	var last report
	first := true
	var recheck <-chan time.Time // armed by a change of the objects
	for {
		var r report
		all := false
		select {
		case <-ctx.Done():
			return
		case r = <-w.queue():
			// Reports within coalesce of this one make one look at the latest: while pods
			// start a sync ends every few milliseconds, each reporting every object.
			select {
			case <-ctx.Done():
				return
			case <-time.After(coalesce):
			}
			select {
			case r = <-w.queue():
			default:
			}
			last = r
		case <-w.Changed:
			if recheck == nil {
				recheck = time.After(recheckDelay)
			}
			continue
		case <-recheck:
			recheck = nil
			r, all = last, true // entries already right are skipped by their writers
		}
		if err := w.publishNodeAnnotations(ctx, r.hostCIDRs); err != nil {
			w.Log.Error("publish node annotations", "node", w.Node, "err", err)
		}
		if all && w.ChangedObjects != nil {
			if changed, every := w.ChangedObjects(); !every {
				e.recheckObjects(q, changed)
				continue
			}
		}
		e.take(q, r, all, !first && !all)
		first = false
	}
}

// take makes r the wanted entries and queues those to write: every one if all, else those
// whose outcome changed; urgent puts them ahead of what earlier looks queued.
func (e *entries) take(q *entryQueue, r report, all, urgent bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	last := e.last
	e.last = r
	if since, ok := r.objects.Since(last.objects); ok && !all {
		// The 10,000 firewalls' statuses are as last taken: only what either report sets over
		// them, or notes otherwise, may have changed.
		look := func(origin dataplane.Origin) {
			if err, reported := r.objects.Get(origin); reported {
				e.want(q, r, origin, err, false, urgent)
			} else {
				e.forget(origin)
			}
		}
		for origin := range since {
			look(origin)
		}
		for origin := range otherNotes(last.notes, r.notes) {
			look(origin)
		}
		return
	}
	before, kept := len(e.wanted), 0 // kept: of those wanted before, the ones r still has
	for origin, err := range r.objects.All() {
		if e.want(q, r, origin, err, all, urgent) {
			kept++
		}
	}
	if kept == before {
		return // none gone: no look at each of 10,000 entries for the one that went
	}
	for origin := range e.wanted {
		if _, ok := r.objects.Get(origin); !ok { // gone since
			e.forget(origin)
		}
	}
}

// otherNotes are the objects whose note differs between a and b.
func otherNotes(a, b map[dataplane.Origin]string) iter.Seq[dataplane.Origin] {
	return func(yield func(dataplane.Origin) bool) {
		for o, note := range a {
			if other, ok := b[o]; (!ok || other != note) && !yield(o) {
				return
			}
		}
		for o := range b {
			if _, ok := a[o]; !ok && !yield(o) {
				return
			}
		}
	}
}

// recheckObjects queues the wanted entries of the objects that changed, to be written even if
// written says they are (another writer may have removed one).
func (e *entries) recheckObjects(q *entryQueue, changed []watchers.ChangedObject) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range changed {
		origin := dataplane.Origin{Kind: dataplane.Kind(c.Kind), Namespace: c.Namespace, Name: c.Name}
		if _, wanted := e.wanted[origin]; wanted {
			e.recheck[origin] = true
			q.add(origin, false)
		}
	}
}

// want makes origin's entry say err (and r's note) and queues it if that changed, or always
// if all. It tells whether the entry was wanted before. e.mu held.
func (e *entries) want(q *entryQueue, r report, origin dataplane.Origin, err error, all, urgent bool) (had bool) {
	// One lookup of an entry that stays as it was: a report holds 10,000 firewalls.
	prev, had := e.wanted[origin]
	if !had && entryWriters[origin.Kind] == nil {
		return false
	}
	note := r.notes[origin]
	outcome := "applied: " + note
	if err != nil {
		outcome = err.Error()
	}
	if !all && had && prev.outcome == outcome && byOutcome[origin.Kind] {
		return true // written, or queued, being written or waiting to be tried again
	}
	e.wanted[origin] = entry{failure: err, note: note, outcome: outcome}
	if all {
		e.recheck[origin] = true
	}
	q.add(origin, urgent)
	return had
}

// forget drops what is known of origin's entry: its object is no longer reported on. e.mu held.
func (e *entries) forget(origin dataplane.Origin) {
	delete(e.wanted, origin)
	delete(e.written, origin)
	delete(e.recheck, origin)
	delete(e.failures, origin)
}

// write takes entries from q and writes them until q stops; a failed write is queued again
// after its wait, in its lane.
func (w *Writer) write(ctx context.Context, q *entryQueue, e *entries) {
	for {
		origin, urgent, ok := q.get()
		if !ok {
			return
		}
		e.mu.Lock()
		x, wanted := e.wanted[origin]
		skip := !wanted || (!e.recheck[origin] && e.written[origin] == x.outcome && byOutcome[origin.Kind])
		delete(e.recheck, origin)
		e.mu.Unlock()
		if skip {
			q.done(origin)
			continue
		}
		wrote, err := entryWriters[origin.Kind](ctx, w, origin, x.failure, x.note)
		e.mu.Lock()
		switch {
		case err != nil && ctx.Err() == nil:
			wait := min(retryMin<<min(e.failures[origin], 5), retryMax)
			e.failures[origin]++
			delete(e.written, origin)
			w.Log.Error("write status", "object", origin.String(), "err", err, "retryIn", wait)
			w.Metrics.wrote("failed")
			time.AfterFunc(wait, func() { q.add(origin, urgent) })
		case err == nil:
			result := "in_place"
			if wrote {
				result = "written"
			}
			w.Metrics.wrote(result)
			delete(e.failures, origin)
			if byOutcome[origin.Kind] && e.wanted[origin].outcome == x.outcome {
				e.written[origin] = x.outcome
			}
		}
		e.mu.Unlock()
		q.done(origin)
	}
}

func (w *Writer) queue() chan report {
	w.pendingOnce.Do(func() { w.pending = make(chan report, 1) })
	return w.pending
}

// Report hands the outcome of a sync to the writer, replacing an outcome not yet written. The
// writer keeps objects and notes: the caller must not modify them afterwards.
func (w *Writer) Report(objects cluster.Outcomes, notes map[dataplane.Origin]string, res dataplane.Result) {
	q := w.queue()
	select {
	case <-q: // drop the stale outcome
	default:
	}
	q <- report{objects: objects, notes: notes, hostCIDRs: res.HostCIDRs}
}
