package status

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	egressdac "github.com/egressd/egressd/api/generated/applyconfiguration/egressd/v1alpha1"
	"github.com/egressd/egressd/api/generated/clientset/versioned"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// Reporter writes this node's NodeReport (egressd.io/v1alpha1) from each sync's outcome: per
// kind, the resourceVersion up to which the dataplane holds every change, and the objects
// whose outcome is more than applied (a failure, a note, an external-route policy's
// gateways). It is one object per node, written by server-side apply under the node's name;
// the controller writes every object's status from all nodes' reports (Aggregator). Writes run
// beside the sync loop: a slow API server never holds the dataplane back, and only the latest
// outcome is written.
type Reporter struct {
	Node     string
	Client   versioned.Interface
	Kube     kubernetes.Interface
	Snapshot *watchers.Snapshot
	Recorder record.EventRecorder
	Log      *slog.Logger
	// Changed signals events of the reported kinds, status-only ones too: with no change of a
	// spec since the last sync, the report's resourceVersions may move past them
	// (watchers.Captured.Through) without a sync, and a status the controller wrote then
	// needs no sync to be covered.
	Changed <-chan struct{}
	// RouteGateways lists the gateways an AdminPolicyBasedExternalRoute configures now
	// (externalroute.ConfiguredGateways: the feature computes them, this package only reports).
	RouteGateways func(snap *watchers.Snapshot, policy string) ([]netip.Addr, error)
	Metrics       *Metrics // optional

	pending     chan report
	pendingOnce sync.Once // Run and Report start concurrently
}

// coalesce is how long the reporter lets newer reports replace one before it looks at it.
const coalesce = 50 * time.Millisecond

// minInterval separates two writes of the report: while objects change, each node writes at
// most twice a second (5,000 nodes: at most 10,000 small writes a second in a burst, where
// entries in every object cost one write per object and node).
const minInterval = 500 * time.Millisecond

// A failed write is tried again after retryMin, doubling up to retryMax.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// maxObjects bounds the outcomes a report lists (the CRD's bound): a node with more lists the
// first and reports nothing known of their kinds, which the controller shows as not yet
// applied rather than as applied.
const maxObjects = 1000

// reportedKinds are the kinds a NodeReport reports on, with the object that marks them.
var reportedKinds = []reportedKind{
	{cluster.KindEgressFirewall, &ovnv1.EgressFirewall{}},
	{cluster.KindEgressQoS, &ovnv1.EgressQoS{}},
	{cluster.KindExternalRoute, &ovnv1.AdminPolicyBasedExternalRoute{}},
}

type reportedKind struct {
	kind dataplane.Kind
	mark any // a pointer to its Go type, as watchers.Marks follow it
}

// report is one sync's outcome: per-object failures and notes, the node's host addresses, and
// how far the caches it compiled from had come.
type report struct {
	objects   cluster.Outcomes
	notes     map[dataplane.Origin]string
	hostCIDRs []netip.Prefix
	marks     watchers.Captured
}

// content is what a NodeReport says.
type content struct {
	programmed map[dataplane.Kind]string
	objects    []outcome // sorted by origin
}

type outcome struct {
	origin   dataplane.Origin
	failure  string
	note     string
	gateways []string
}

func (c content) equal(d content) bool {
	return maps.Equal(c.programmed, d.programmed) && slices.EqualFunc(c.objects, d.objects, func(a, b outcome) bool {
		return a.origin == b.origin && a.failure == b.failure && a.note == b.note && slices.Equal(a.gateways, b.gateways)
	})
}

// Run writes the reports until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	var (
		last      report
		have      bool
		written   *content
		wroteAt   time.Time
		due       <-chan time.Time // a write waits for minInterval, or its retry
		failures  int
		changedCh = r.Changed
	)
	for {
		select {
		case <-ctx.Done():
			return
		case rep := <-r.queue():
			// Reports within coalesce of this one make one look at the latest: while pods
			// start a sync ends every few milliseconds.
			select {
			case <-ctx.Done():
				return
			case <-time.After(coalesce):
			}
			select {
			case rep = <-r.queue():
			default:
			}
			last, have = rep, true
			if err := r.publishNodeAnnotations(ctx, rep.hostCIDRs); err != nil {
				r.Log.Error("publish node annotations", "node", r.Node, "err", err)
			}
		case <-changedCh:
		case <-due:
			due = nil
		}
		if !have || due != nil {
			continue // nothing synced yet, or a write is due later and will look then
		}
		c := r.content(last)
		if written != nil && c.equal(*written) {
			continue
		}
		if wait := minInterval - time.Since(wroteAt); written != nil && wait > 0 {
			due = time.After(wait)
			continue
		}
		wroteAt = time.Now()
		if err := r.write(ctx, c); err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := min(retryMin<<min(failures, 5), retryMax)
			failures++
			r.Log.Error("write the node's report", "nodeReport", r.Node, "err", err, "retryIn", wait)
			r.Metrics.wrote("failed")
			due = time.After(wait)
			continue
		}
		failures = 0
		r.Metrics.wrote("written")
		r.events(written, c)
		written = &c
	}
}

// content is what rep says, in a NodeReport's terms.
func (r *Reporter) content(rep report) content {
	byOrigin := map[dataplane.Origin]*outcome{}
	get := func(o dataplane.Origin) *outcome {
		if byOrigin[o] == nil {
			byOrigin[o] = &outcome{origin: o}
		}
		return byOrigin[o]
	}
	for o, err := range rep.objects.Failures() {
		if reported(o.Kind) {
			get(o).failure = err.Error()
		}
	}
	for o, note := range rep.notes {
		if reported(o.Kind) && byOrigin[o] == nil {
			get(o).note = note
		}
	}
	if policies, err := r.Snapshot.ExternalRoutes.List(labels.Everything()); err == nil {
		for _, p := range policies {
			o := dataplane.Origin{Kind: cluster.KindExternalRoute, Name: p.Name}
			if err, ok := rep.objects.Get(o); !ok || err != nil {
				continue
			}
			gws, err := r.RouteGateways(r.Snapshot, p.Name)
			if err != nil {
				continue // changed since the sync: the next one reports it
			}
			out := get(o)
			for _, g := range gws {
				out.gateways = append(out.gateways, g.String())
			}
			slices.Sort(out.gateways)
			out.gateways = slices.Compact(out.gateways)
		}
	}
	c := content{programmed: map[dataplane.Kind]string{}}
	for _, o := range byOrigin {
		c.objects = append(c.objects, *o)
	}
	slices.SortFunc(c.objects, func(a, b outcome) int {
		return cmp.Or(cmp.Compare(a.origin.Kind, b.origin.Kind), cmp.Compare(a.origin.Namespace, b.origin.Namespace), cmp.Compare(a.origin.Name, b.origin.Name))
	})
	unknown := map[dataplane.Kind]bool{}
	if len(c.objects) > maxObjects {
		for _, o := range c.objects[maxObjects:] {
			unknown[o.origin.Kind] = true
		}
		c.objects = c.objects[:maxObjects]
	}
	for _, k := range reportedKinds {
		if rv := rep.marks.Through(k.mark); rv != 0 && !unknown[k.kind] {
			c.programmed[k.kind] = strconv.FormatUint(rv, 10)
		}
	}
	return c
}

func reported(k dataplane.Kind) bool {
	return slices.ContainsFunc(reportedKinds, func(r reportedKind) bool { return r.kind == k })
}

// write applies c as the node's report, owned by its Node (deleted with it).
func (r *Reporter) write(ctx context.Context, c content) error {
	node, err := r.Snapshot.Nodes.Get(r.Node)
	if err != nil {
		return err
	}
	p := egressdac.Programmed().WithEgressFirewalls(c.programmed[cluster.KindEgressFirewall]).
		WithEgressQoSes(c.programmed[cluster.KindEgressQoS]).
		WithAdminPolicyBasedExternalRoutes(c.programmed[cluster.KindExternalRoute])
	ac := egressdac.NodeReport(r.Node).WithProgrammed(p).WithOwnerReferences(metav1ac.OwnerReference().
		WithAPIVersion("v1").WithKind("Node").WithName(r.Node).WithUID(node.UID))
	for _, o := range c.objects {
		out := egressdac.ObjectOutcome().WithKind(string(o.origin.Kind)).WithName(o.origin.Name)
		if o.origin.Namespace != "" {
			out.WithNamespace(o.origin.Namespace)
		}
		if o.failure != "" {
			out.WithFailure(o.failure)
		}
		if o.note != "" {
			out.WithNote(o.note)
		}
		if len(o.gateways) > 0 {
			out.WithGateways(o.gateways...)
		}
		ac.WithObjects(out)
	}
	_, err = r.Client.EgressdV1alpha1().NodeReports().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: r.Node, Force: true})
	return err
}

// events records a Warning on each object whose failure or note is new since was: an Event
// names the node, as upstream's zones do.
func (r *Reporter) events(was *content, now content) {
	before := map[dataplane.Origin]outcome{}
	if was != nil {
		for _, o := range was.objects {
			before[o.origin] = o
		}
	}
	for _, o := range now.objects {
		prev := before[o.origin]
		if (o.failure == "" || o.failure == prev.failure) && (o.note == "" || o.note == prev.note) {
			continue
		}
		obj, kind := r.object(o.origin)
		if obj == nil {
			continue
		}
		if o.failure != "" {
			r.Recorder.Eventf(obj, corev1.EventTypeWarning, kind+"NotApplied", "%s: %s", r.Node, o.failure)
		} else {
			r.Recorder.Eventf(obj, corev1.EventTypeWarning, kind+"Note", "%s: %s", r.Node, o.note)
		}
	}
}

// object is o's cached object and the prefix of its Events' reasons, nil if gone.
func (r *Reporter) object(o dataplane.Origin) (runtime.Object, string) {
	switch o.Kind {
	case cluster.KindEgressFirewall:
		if ef, err := r.Snapshot.EgressFirewalls.EgressFirewalls(o.Namespace).Get(o.Name); err == nil {
			return ef, "EgressFirewall"
		}
	case cluster.KindEgressQoS:
		if q, err := r.Snapshot.EgressQoSes.EgressQoSes(o.Namespace).Get(o.Name); err == nil {
			return q, "EgressQoS"
		}
	case cluster.KindExternalRoute:
		if p, err := r.Snapshot.ExternalRoutes.Get(o.Name); err == nil {
			return p, "AdminPolicyBasedExternalRoute"
		}
	}
	return nil, ""
}

func (r *Reporter) queue() chan report {
	r.pendingOnce.Do(func() { r.pending = make(chan report, 1) })
	return r.pending
}

// Report hands the outcome of a sync to the reporter, replacing an outcome not yet looked at:
// marks are the caches' marks captured before the sync read them. The reporter keeps objects
// and notes: the caller must not modify them afterwards.
func (r *Reporter) Report(objects cluster.Outcomes, notes map[dataplane.Origin]string, res dataplane.Result, marks watchers.Captured) {
	q := r.queue()
	select {
	case <-q: // drop the stale outcome
	default:
	}
	q <- report{objects: objects, notes: notes, hostCIDRs: res.HostCIDRs, marks: marks}
}
