// Package nodeagent is egressd's brain: the per-API compile steps (one package each), the merge
// of their parts into the node's desired state, a level-triggered sync loop that hands that state
// to the dataplane and reports the result, and the leader-elected cluster controllers.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressfirewall"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/nodeagent/egressqos"
	"github.com/egressd/egressd/nodeagent/egressservice"
	"github.com/egressd/egressd/nodeagent/externalroute"
	"github.com/egressd/egressd/watchers"
)

// Names is what the sync loop needs of a DNS resolver.
type Names interface {
	Want(names []string)
	Lookup(name string) []netip.Addr
	Changed() <-chan struct{}
}

// Reporter is told the outcome of every sync: the objects the state was compiled from with what
// failed for each (a map it may keep: the loop makes a new one each sync), and the node's facts.
type Reporter interface {
	Report(objects map[dataplane.Origin]error, res dataplane.Result)
}

// Announced pods are merged into what a sync compiles from; after the apply, Applied is told
// the state and its result.
type Announced interface {
	// Overlay returns the snapshot to compile from and the announced pods of this node.
	Overlay(snap *watchers.Snapshot) (*watchers.Snapshot, []*corev1.Pod)
	Applied(state *dataplane.State, res dataplane.Result)
}

// SyncLoop recomputes the whole desired state after any change and applies it.
type SyncLoop struct {
	Node string
	// Networks are the cluster networks of the command line; the rest is discovered
	// (cluster.Networks). Cluster networks are never subject to EgressFirewall.
	Networks cluster.NetworkFlags
	Snapshot *watchers.Snapshot
	// Changed signals API changes; a burst is coalesced by Debounce.
	Changed <-chan struct{}
	// Triggers signal other changes that need a sync at once: the kernel (links, addresses),
	// DNS answers, BFD sessions, health results.
	Triggers []<-chan struct{}
	Applier  dataplane.Applier
	// Status, when set, reports each sync's outcome on the API objects.
	Status Reporter
	// DNS resolves the names of dnsName rules.
	DNS Names
	// PendingSince, when set, says when the oldest change this sync handles arrived.
	PendingSince func() time.Time
	Metrics      *Metrics
	Log          *slog.Logger
	// Debounce coalesces bursts of changes into one sync.
	Debounce time.Duration
	// Resync re-applies the state periodically, repairing drift made behind egressd's back.
	Resync time.Duration

	// MarkMask are the skb->mark bits egressd may use (dataplane.DefaultMarkMask when 0).
	MarkMask uint32
	// Steering is how steered traffic reaches egress nodes ("": auto).
	Steering SteeringMode
	// Recorder, when set, records the compile steps' events (EgressIP's UndefinedRequest) and
	// EgressServices this node failed to program.
	Recorder EventRecorder
	// Announced, when set, supplies pods announced before their Pod objects show them (the CNI
	// plugin's ADD) and learns the outcome of every sync (nodeagent/cniserver.Store).
	Announced Announced

	synced    atomic.Bool
	firewalls egressfirewall.Compiler
	egressIPs egressip.Compiler
	// Routes compiles AdminPolicyBasedExternalRoutes (Routes.Legacy: the namespace and pod
	// annotations of older OVN-Kubernetes too).
	Routes externalroute.Compiler
	// GatewayBFD holds the timers of the BFD sessions to external gateways (MinTx, MinRx,
	// Multiplier; zero: the dataplane's defaults).
	GatewayBFD dataplane.BFDPeer
	steering   steering
	recorded   map[egressip.Event]bool
	// parts are the last parts each feature compiled; a feature whose compile fails keeps its
	// previous part (fail closed: never an empty part because a lister failed).
	parts parts
	// failing is the last error logged per object, so that a persistent failure is logged
	// when it starts or changes, not at every sync.
	failing map[dataplane.Origin]string
	// outside is the last count of local pod addresses outside the cluster networks.
	outside int
	retry   backoff
}

// Synced reports whether the first sync has finished (readiness).
func (l *SyncLoop) Synced() bool { return l.synced.Load() }

// Run syncs once, then after every debounced change, trigger (which cuts a debounce short),
// retry or resync period, until ctx ends.
func (l *SyncLoop) Run(ctx context.Context) {
	resync := time.NewTicker(l.Resync)
	defer resync.Stop()
	triggered := fanIn(ctx, append([]<-chan struct{}{l.DNS.Changed()}, l.Triggers...))
	for {
		l.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-resync.C:
		case <-triggered:
		case <-l.retry.after():
		case <-l.Changed:
			// Let a burst of API events settle, unless something needs a sync at once (a pod
			// whose CNI ADD waits for it): the sync reads the latest state either way.
			select {
			case <-ctx.Done():
				return
			case <-time.After(l.Debounce):
			case <-triggered:
			}
		}
		// The informers signal a change after their caches hold it: this sync covers any
		// change signalled so far, which need not cost a debounced sync of its own.
		select {
		case <-l.Changed:
		default:
		}
	}
}

// fanIn merges signal channels into one that holds at most one pending signal.
func fanIn(ctx context.Context, in []<-chan struct{}) <-chan struct{} {
	out := make(chan struct{}, 1)
	for _, c := range in {
		if c == nil {
			continue
		}
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case _, ok := <-c:
					if !ok {
						return
					}
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return out
}

// compile runs one feature's compile step, timing it; a failure is logged and counted, and
// the caller keeps the feature's previous part.
func (l *SyncLoop) compile(feature string, f func() error) {
	start := time.Now()
	err := f()
	l.Metrics.SyncDuration.WithLabelValues(feature).Observe(time.Since(start).Seconds())
	if err != nil {
		l.Metrics.SyncErrors.WithLabelValues(feature).Inc()
		l.Log.Error("compile failed, keeping the feature's previous state", "feature", feature, "err", err)
	}
}

func (l *SyncLoop) sync(ctx context.Context) {
	var since time.Time
	if l.PendingSince != nil {
		since = l.PendingSince()
	}
	networks := cluster.Networks(l.Snapshot, l.Networks)
	snap, announced := l.Snapshot, []*corev1.Pod(nil)
	if l.Announced != nil {
		snap, announced = l.Announced.Overlay(l.Snapshot)
	}
	in := &cluster.Input{Snap: snap, Node: l.Node, Networks: networks, Lookup: l.DNS.Lookup}
	l.compile("pods", func() error {
		pods, err := cluster.LocalPods(snap, l.Node, announced...)
		if err == nil {
			l.parts.pods = pods
		}
		return err
	})
	in.Pods = l.parts.pods
	l.checkNetworks(in)
	l.compile("egressfirewall", func() error {
		p, err := l.firewalls.Compile(in)
		if err == nil {
			l.parts.firewall = p
		}
		return err
	})
	l.compile("egressqos", func() error {
		p, err := egressqos.Compile(in)
		if err == nil {
			l.parts.qos = p
		}
		return err
	})
	l.compile("egressip", func() error {
		p, err := l.egressIPs.Compile(in)
		if err == nil {
			l.parts.egressIP = p
		}
		return err
	})
	l.compile("egressservice", func() error {
		p, err := egressservice.Compile(in)
		if err == nil {
			l.parts.service = p
		}
		return err
	})
	l.compile("externalroute", func() error {
		p, err := l.Routes.Compile(in)
		if err == nil {
			l.parts.routes = p
			for _, w := range p.Warnings {
				l.Log.Debug("external gateway", "warning", w)
			}
		}
		return err
	})
	l.recordEvents(l.parts.egressIP.Events)
	l.DNS.Want(l.parts.firewall.DNSNames)
	mask := l.MarkMask
	if mask == 0 {
		mask = dataplane.DefaultMarkMask
	}
	l.steering.mode, l.steering.node = l.Steering, l.Node
	state, objects := merge(networks, cluster.LoadBalancerVIPs(l.Snapshot), cluster.Frontends(l.Snapshot, l.Node), &l.parts, &l.steering, mask)
	for i := range state.BFD {
		state.BFD[i].MinTx, state.BFD[i].MinRx, state.BFD[i].Multiplier = l.GatewayBFD.MinTx, l.GatewayBFD.MinRx, l.GatewayBFD.Multiplier
	}
	l.Metrics.observePaths(&state)

	start := time.Now()
	res := l.Applier.Apply(ctx, &state)
	l.Metrics.SyncDuration.WithLabelValues("apply").Observe(time.Since(start).Seconds())
	if !since.IsZero() {
		l.Metrics.Latency.Observe(time.Since(since).Seconds())
	}
	if l.Announced != nil {
		l.Announced.Applied(&state, res)
	}
	// Paths beyond the node's steering slots are not in the state: they fail as if applying
	// them had (logged, counted, in their objects' status and Events, retried).
	for o, err := range l.steering.unplacedFailures(mask) {
		if res.Failed == nil {
			res.Failed = map[dataplane.Origin]error{}
		}
		res.Failed[o] = errors.Join(res.Failed[o], err)
	}
	l.logFailures(res.Failed)
	if applyFailed(objects, res.Failed) {
		l.retry.failed()
	} else {
		l.retry.reset()
	}
	// An object reports what the dataplane failed of it, else what failed to compile (the
	// dataplane keeps enforcing its previous rules then, and may have nothing to say).
	for o := range objects {
		if err := res.Failed[o]; err != nil {
			objects[o] = err
		}
	}
	blamePods(objects, res.Failed)
	l.Metrics.observeObjects(objects, res.Failed)
	if l.Status != nil {
		l.Status.Report(objects, res)
	}
	if !l.synced.Swap(true) {
		l.Log.Info("first sync finished", "duration", time.Since(start).Round(time.Microsecond))
	}
}

// blamePods reports what failed for a local pod (its interface not found, the classifier not
// attached) in the status of the policies of its namespace: they are not in force for it. The
// pods are named in order, on one line with what else failed, as upstream prints several errors
// ("[e1, e2]"): a status message is one line, and the same failures make the same message.
func blamePods(objects, failed map[dataplane.Origin]error) {
	var pods []dataplane.Origin
	for o := range failed {
		if o.Kind == cluster.KindPod {
			pods = append(pods, o)
		}
	}
	if len(pods) == 0 {
		return
	}
	slices.SortFunc(pods, func(a, b dataplane.Origin) int { return strings.Compare(a.Name, b.Name) })
	for o := range objects {
		if o.Kind != cluster.KindEgressFirewall && o.Kind != cluster.KindEgressQoS {
			continue
		}
		errs := flatten(objects[o])
		blamed := false
		for _, pod := range pods {
			if pod.Namespace != o.Namespace {
				continue
			}
			blamed = true
			for _, err := range flatten(failed[pod]) {
				errs = append(errs, fmt.Errorf("pod %s: %w", pod.Name, err))
			}
		}
		if blamed {
			objects[o] = utilerrors.NewAggregate(errs)
		}
	}
}

// flatten lists the errors err holds: those joined (errors.Join) or aggregated, recursively.
func flatten(err error) []error {
	var inner []error
	switch e := err.(type) {
	case nil:
		return nil
	case utilerrors.Aggregate:
		inner = e.Errors()
	case interface{ Unwrap() []error }:
		inner = e.Unwrap()
	default:
		return []error{err}
	}
	var out []error
	for _, x := range inner {
		out = append(out, flatten(x)...)
	}
	return out
}

// applyFailed reports whether the dataplane failed something that compiled: that is worth
// retrying, whereas an object that does not compile fails the same way until it changes.
func applyFailed(compiled map[dataplane.Origin]error, failed map[dataplane.Origin]error) bool {
	for o := range failed {
		if compiled[o] == nil {
			return true
		}
	}
	return false
}

func (l *SyncLoop) logFailures(failed map[dataplane.Origin]error) {
	failing := map[dataplane.Origin]string{}
	for origin, err := range failed {
		l.Metrics.SyncErrors.WithLabelValues("apply").Inc()
		failing[origin] = err.Error()
		if l.failing[origin] != err.Error() {
			l.Log.Error("apply failed", "object", origin.String(), "err", err)
			l.recordServiceFailure(origin, err)
		}
	}
	for origin := range l.failing {
		if _, still := failing[origin]; !still {
			l.Log.Info("applied again", "object", origin.String())
		}
	}
	l.failing = failing
}

// EventRecorder records an Event on an object (client-go's record.EventRecorder has this).
type EventRecorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
}

// recordEvents records the compile steps' events that were not recorded before: a lasting
// condition is reported once, not at every sync.
func (l *SyncLoop) recordEvents(events []egressip.Event) {
	if l.Recorder == nil {
		return
	}
	seen := map[egressip.Event]bool{}
	for _, e := range events {
		seen[e] = true
		if l.recorded[e] {
			continue
		}
		ref := &corev1.ObjectReference{Kind: "EgressIP", APIVersion: ovnv1.SchemeGroupVersion.String(), Name: e.EgressIP}
		l.Recorder.Event(ref, e.Type, e.Reason, e.Message)
	}
	l.recorded = seen
}

// recordServiceFailure records a Warning on an EgressService this node failed to program (a
// network no routing table or VRF of this node is named by, an SNAT conflict): it has no status
// field of its own to say so.
func (l *SyncLoop) recordServiceFailure(o dataplane.Origin, err error) {
	if l.Recorder == nil || o.Kind != cluster.KindEgressService {
		return
	}
	ref := &corev1.ObjectReference{Kind: "EgressService", APIVersion: ovnv1.SchemeGroupVersion.String(), Namespace: o.Namespace, Name: o.Name}
	l.Recorder.Event(ref, corev1.EventTypeWarning, "EgressServiceNotApplied", fmt.Sprintf("%s: %v", l.Node, err))
}

// checkNetworks reports local pod addresses outside the cluster networks, once when their number
// changes: discovery missed the CNI's pod networks.
func (l *SyncLoop) checkNetworks(in *cluster.Input) {
	outside := 0
	var example string
	for _, p := range in.Pods {
		for _, ip := range p.IPs {
			if !in.InNetworks(ip) {
				outside++
				example = fmt.Sprintf("pod %s/%s address %s", p.Origin.Namespace, p.Origin.Name, ip)
			}
		}
	}
	l.Metrics.OutsideNetworks.Set(float64(outside))
	if outside != l.outside && outside > 0 {
		l.Log.Warn("pod addresses outside the cluster networks: traffic to them is judged as leaving the cluster; set --cluster-cidr",
			"addresses", outside, "example", example, "networks", in.Networks)
	}
	l.outside = outside
}
