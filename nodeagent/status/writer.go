package status

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
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
// success with the note, if any, appended.
type entryWriter func(ctx context.Context, w *Writer, o dataplane.Origin, failure error, note string) error

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
// owns exactly its own entry. Writes run on their own goroutine: a slow API server never holds
// the dataplane back, and only the latest wanted status of an object is written.
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
	// RouteGateways lists the gateways an AdminPolicyBasedExternalRoute configures now, which
	// its success entry names (externalroute.ConfiguredGateways: the feature computes them,
	// this package only writes).
	RouteGateways func(snap *watchers.Snapshot, policy string) ([]netip.Addr, error)

	pending     chan report
	pendingOnce sync.Once // Run and Report start concurrently
}

// coalesce is how long the writer lets newer reports replace one before it writes.
const coalesce = 50 * time.Millisecond

// parallelWrites bounds the entries written at once: each is a request whose time is mostly the
// round trip, and one at a time an agent wrote about 7 a second (10,000 firewalls: 25 minutes);
// the client's rate limit still bounds the rate.
const parallelWrites = 8

// A pass with a failed write is tried again after retryMin, doubling up to retryMax.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// report is one sync's outcome: per-object failures and notes, and the node's host addresses.
type report struct {
	objects   map[dataplane.Origin]error
	notes     map[dataplane.Origin]string
	hostCIDRs []netip.Prefix
}

// Run writes reported statuses until ctx ends.
func (w *Writer) Run(ctx context.Context) {
	var last report
	// written are the outcomes written (or found in place) by the last pass, of the kinds
	// byOutcome: a sync's report looks again only at what changed (a thousand firewalls, and a
	// report after every pod's sync); a change of the objects themselves looks at all.
	written := map[dataplane.Origin]string{}
	// retry brings back the last outcome when a write failed (the API server away, a
	// conflict): what failed is written again then, not only at the next sync's report.
	var retry <-chan time.Time
	retryAfter := retryMin
	for {
		var r report
		all := true
		select {
		case <-ctx.Done():
			return
		case <-retry:
			r, all = last, false
		case r = <-w.queue():
			// Reports within coalesce of this one make one pass over the latest: while pods
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
			last, all = r, false
		case <-w.Changed:
			r = last // entries already right are skipped
		}
		if err := w.publishNodeAnnotations(ctx, r.hostCIDRs); err != nil {
			w.Log.Error("publish node annotations", "node", w.Node, "err", err)
		}
		kept := 0 // entries of written that r still holds
		var failed atomic.Bool
		var mu sync.Mutex // written, from the writes in flight
		writes := make(chan struct{}, parallelWrites)
		var inFlight sync.WaitGroup
		for origin, err := range r.objects {
			if ctx.Err() != nil {
				break
			}
			if entryWriters[origin.Kind] == nil {
				continue
			}
			note := r.notes[origin]
			outcome := "applied: " + note
			if err != nil {
				outcome = err.Error()
			}
			mu.Lock()
			prev, ok := written[origin]
			if ok && prev == outcome && !all {
				kept++
				mu.Unlock()
				continue
			}
			mu.Unlock()
			writes <- struct{}{}
			inFlight.Go(func() {
				defer func() { <-writes }()
				werr := entryWriters[origin.Kind](ctx, w, origin, err, note)
				mu.Lock()
				defer mu.Unlock()
				if werr != nil {
					w.Log.Error("write status", "object", origin.String(), "err", werr, "retryIn", retryAfter)
					delete(written, origin)
					failed.Store(true)
				} else if byOutcome[origin.Kind] {
					written[origin] = outcome
					kept++
				}
			})
		}
		inFlight.Wait()
		if ctx.Err() != nil {
			return
		}
		retry = nil
		if failed.Load() {
			retry = time.After(retryAfter)
			retryAfter = min(2*retryAfter, retryMax)
		} else {
			retryAfter = retryMin
		}
		if len(written) > kept { // objects gone since
			for origin := range written {
				if _, ok := r.objects[origin]; !ok {
					delete(written, origin)
				}
			}
		}
	}
}

func (w *Writer) queue() chan report {
	w.pendingOnce.Do(func() { w.pending = make(chan report, 1) })
	return w.pending
}

// Report hands the outcome of a sync to the writer, replacing an outcome not yet written. The
// writer keeps objects and notes: the caller must not modify them afterwards.
func (w *Writer) Report(objects map[dataplane.Origin]error, notes map[dataplane.Origin]string, res dataplane.Result) {
	q := w.queue()
	select {
	case <-q: // drop the stale outcome
	default:
	}
	q <- report{objects: objects, notes: notes, hostCIDRs: res.HostCIDRs}
}
