// Package nodeagent is egressd's brain on a node: a level-triggered sync loop that compiles
// every feature's part of the node state (features.go: one API each, its pure compile in
// nodeagent/<api>), merges the parts into the node's desired state (merge.go), hands that state
// to the dataplane and reports the result. The packages below it hold the features, what they
// share (nodeagent/cluster) and the Lease and loops of the cluster controllers (nodeagent/leader).
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/watchers"
)

// Names is what the sync loop needs of a DNS resolver.
type Names interface {
	Want(names []string)
	Lookup(name string) []netip.Addr
	Changed() <-chan struct{}
	// Generation versions the addresses learned from DNS answers; Applied hears which one a
	// sync compiled from once it is applied (the answers held until then go on to the pods).
	Generation() uint64
	Applied(gen uint64)
	// Capped are the namespaces whose pods' DNS answers are no longer learned, each with why.
	Capped() map[string]string
}

// Reporter is told the outcome of every sync: the objects the state was compiled from with what
// failed for each, notes on some that did not fail (it may keep them: the loop changes neither
// after the report), the node's facts, and how far the caches had come when the sync began
// reading them.
type Reporter interface {
	Report(objects cluster.Outcomes, notes map[dataplane.Origin]string, res dataplane.Result, marks watchers.Captured)
}

// Announced pods are merged into what a sync compiles from; after the apply, Applied is told
// the state and its result.
type Announced interface {
	// Overlay returns the snapshot to compile from and the announced pods of this node.
	Overlay(snap *watchers.Snapshot) (*watchers.Snapshot, []*watchers.Pod)
	// HostInterfaces sets the host-side interfaces of the pods the CNI plugin announced.
	HostInterfaces(pods []dataplane.Pod)
	Applied(state *dataplane.State, res dataplane.Result)
	// Changed signals newly announced pods: they need a sync at once.
	Changed() <-chan struct{}
}

// Config are the sync loop's settings (the agent's command line).
type Config struct {
	Node string
	// Networks are the cluster networks of the command line; the rest is discovered
	// (cluster.Networks). Cluster networks are never subject to EgressFirewall.
	Networks cluster.NetworkFlags
	// Debounce is the least time between the end of a sync and the start of one for an API
	// change: a burst of changes costs a sync per Debounce, an isolated change syncs at once.
	Debounce time.Duration
	// Resync is the longest time without a sync: the state is compiled and applied again,
	// whatever changed. The dataplane's own full pass repairs drift made behind egressd's back
	// (kernel.Options.FullPass).
	Resync time.Duration
	// MarkMask are the skb->mark bits egressd may use (dataplane.DefaultMarkMask when 0).
	MarkMask uint32
	// Steering is how steered traffic reaches egress nodes ("": auto).
	Steering SteeringMode
	// LegacyGateways compiles the namespace and pod annotations of older OVN-Kubernetes'
	// external gateways too.
	LegacyGateways bool
	// GatewayBFD holds the timers of the BFD sessions to external gateways (MinTx, MinRx,
	// Multiplier; zero: the dataplane's defaults).
	GatewayBFD dataplane.BFDPeer
	// DNSAnswersQueue is the NFQUEUE number the agent reads the DNS answers to pods on (0:
	// none are read); only those of DNSResolvers and of the cluster's DNS Service are.
	DNSAnswersQueue uint16
	DNSResolvers    []netip.Addr
}

// Deps are what the sync loop reads, applies to and reports to.
type Deps struct {
	Snapshot *watchers.Snapshot
	// Changed signals API changes; a burst is coalesced as Config.Debounce says.
	Changed <-chan struct{}
	// Kernel signals that the kernel changed under the dataplane (links, addresses, routes:
	// kernel.Applier's Changed), paced as API changes: the veth of a new pod comes with a
	// burst of link events, which costs one sync, not one each, and the pod's CNI ADD (which
	// needs a sync at once, as DNS answers do) does not queue behind them.
	Kernel <-chan struct{}
	// Urgent signals the kernel's changes whose sync must not wait (kernel.Applier's Urgent:
	// a BFD session went Down, egressd's table or filters were deleted).
	Urgent <-chan struct{}
	// PendingSince, when set, says when the oldest change this sync handles arrived.
	PendingSince func() time.Time
	// DNS resolves the names of dnsName rules.
	DNS     Names
	Applier dataplane.Applier
	// Status, when set, reports each sync's outcome on the API objects.
	Status Reporter
	// Recorder, when set, records the compile steps' events (EgressIP's UndefinedRequest) and
	// EgressServices this node failed to program.
	Recorder EventRecorder
	// ServePods, when set, caches the other nodes' pods of the given scopes (and no others
	// besides the node's own): watchers.Watchers.ServePods of a NodePods cache. Each sync asks
	// for those its features read before it compiles.
	ServePods func(ctx context.Context, scopes []watchers.PodScope) error
	// Announced, when set, supplies pods announced before their Pod objects show them (the CNI
	// plugin's ADD) and learns the outcome of every sync (nodeagent/cniserver.Store).
	Announced Announced
	Metrics   *Metrics
	Log       *slog.Logger
}

// SyncLoop recomputes the whole desired state after any change and applies it.
type SyncLoop struct {
	cfg      Config
	deps     Deps
	features []feature
	triggers []<-chan struct{}
	synced   atomic.Bool
	steering steering
	// parts are the last parts each feature compiled.
	parts parts
	// merged is what the merge of the parts keeps across syncs.
	merged mergeMemo
	// failing is the last error logged per object, so that a persistent failure is logged
	// when it starts or changes, not at every sync.
	failing map[dataplane.Origin]string
	// outside is the last count of local pod addresses outside the cluster networks.
	outside int
	// conflicts are the CNI settings that undo what egressd programs, as last reported.
	conflicts string
	retry     backoff
	// served are the scopes of other nodes' pods the last sync asked for (servePods).
	served   []watchers.PodScope
	vips     watchers.Memo[[]netip.Prefix]
	networks watchers.Memo[[]netip.Prefix]
}

// New builds the sync loop of the node cfg.Node, with every feature.
func New(cfg Config, deps Deps) *SyncLoop {
	if cfg.MarkMask == 0 {
		cfg.MarkMask = dataplane.DefaultMarkMask
	}
	triggers := []<-chan struct{}{deps.DNS.Changed(), deps.Urgent}
	if deps.Announced != nil {
		triggers = append(triggers, deps.Announced.Changed())
	}
	return &SyncLoop{cfg: cfg, deps: deps, features: newFeatures(cfg, deps), triggers: triggers,
		steering: steering{mode: cfg.Steering, node: cfg.Node}}
}

// Synced reports whether the first sync has finished (readiness).
func (l *SyncLoop) Synced() bool { return l.synced.Load() }

// Run syncs once, then after every change (paced by Debounce), trigger (which cuts the pacing
// short), retry or resync period, until ctx ends.
func (l *SyncLoop) Run(ctx context.Context) {
	// Resync after a quiet period, not on a clock of its own: the dataplane's full pass asks
	// for a sync every period too (kernel.Options.FullPass), which then resets it.
	resync := time.NewTimer(l.cfg.Resync)
	defer resync.Stop()
	triggered := fanIn(ctx, l.triggers)
	for {
		// The dataplane notes a change before it signals it, and the sync's apply takes the
		// notes: a signal pending now is covered by this sync; one that comes during it is not.
		select {
		case <-l.deps.Kernel:
		default:
		}
		l.sync(ctx)
		synced := time.Now()
		resync.Reset(l.cfg.Resync)
		select {
		case <-ctx.Done():
			return
		case <-resync.C:
		case <-triggered:
		case <-l.retry.after():
		case <-l.deps.Changed:
			if !l.pace(ctx, synced, triggered) {
				return
			}
		case <-l.deps.Kernel:
			if !l.pace(ctx, synced, triggered) {
				return
			}
		}
		// The informers signal a change after their caches hold it: this sync covers any
		// change signalled so far, which need not cost a debounced sync of its own.
		select {
		case <-l.deps.Changed:
		default:
		}
	}
}

// pace waits until Debounce after the last sync ended, unless a trigger cuts it short, and says
// whether ctx is still going. A change after a quiet period syncs at once: an edit is
// programmed without waiting. One within Debounce of the last sync (a burst of API or kernel
// events) waits until then, unless something needs a sync at once (a pod whose CNI ADD waits
// for it): the sync reads the latest state either way, as kube-proxy's minSyncPeriod.
func (l *SyncLoop) pace(ctx context.Context, synced time.Time, triggered <-chan struct{}) bool {
	wait := l.cfg.Debounce - time.Since(synced)
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-triggered:
	}
	return true
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
	l.deps.Metrics.SyncDuration.WithLabelValues(feature).Observe(time.Since(start).Seconds())
	if err != nil {
		l.deps.Metrics.SyncErrors.WithLabelValues(feature).Inc()
		l.deps.Log.Error("compile failed, keeping the feature's previous state", "feature", feature, "err", err)
	}
}

func (l *SyncLoop) sync(ctx context.Context) {
	marks := l.deps.Snapshot.Marks.Capture() // before anything reads the caches
	var since time.Time
	if l.deps.PendingSince != nil {
		since = l.deps.PendingSince()
	}
	l.servePods(ctx)
	networks := l.clusterNetworks()
	snap, announced := l.deps.Snapshot, []*watchers.Pod(nil)
	if l.deps.Announced != nil {
		snap, announced = l.deps.Announced.Overlay(l.deps.Snapshot)
	}
	learned := l.deps.DNS.Generation() // before Lookup reads them
	in := &cluster.Input{Snap: snap, Node: l.cfg.Node, Networks: networks, Lookup: l.deps.DNS.Lookup}
	l.compile("pods", func() error {
		pods, err := cluster.LocalPods(snap, l.cfg.Node, announced...)
		if err == nil && l.deps.Announced != nil {
			l.deps.Announced.HostInterfaces(pods)
		}
		return keep(&l.parts.pods, pods, err)
	})
	in.Pods = l.parts.pods
	l.checkNetworks(in)
	for _, f := range l.features {
		l.compile(f.name(), func() error { return f.compile(in, &l.parts) })
	}
	mask := l.cfg.MarkMask
	merged := time.Now()
	state, objects := merge(networks, l.loadBalancerVIPs(), cluster.Frontends(l.deps.Snapshot, l.cfg.Node), &l.parts, &l.steering, &l.merged, mask)
	state.Nftables.DNSSnoop = dnsSnoop(l.parts.pods, l.parts.firewall.DNSNamespaces, l.cfg.DNSAnswersQueue)
	if len(state.Nftables.DNSSnoop.Pods) > 0 {
		state.Nftables.DNSSnoop.Resolvers = cluster.ClusterDNS(l.deps.Snapshot, l.cfg.DNSResolvers)
	}
	for i := range state.BFD {
		state.BFD[i].MinTx, state.BFD[i].MinRx, state.BFD[i].Multiplier = l.cfg.GatewayBFD.MinTx, l.cfg.GatewayBFD.MinRx, l.cfg.GatewayBFD.Multiplier
	}
	l.deps.Metrics.SyncDuration.WithLabelValues("merge").Observe(time.Since(merged).Seconds())
	l.deps.Metrics.observePaths(&state)

	start := time.Now()
	res := l.deps.Applier.Apply(ctx, &state)
	l.deps.Metrics.SyncDuration.WithLabelValues("apply").Observe(time.Since(start).Seconds())
	if !since.IsZero() {
		l.deps.Metrics.Latency.Observe(time.Since(since).Seconds())
	}
	if l.deps.Announced != nil {
		l.deps.Announced.Applied(&state, res)
	}
	l.deps.DNS.Applied(learned)
	// Paths beyond the node's steering slots are not in the state: they fail as if applying
	// them had (logged, counted, in their objects' status and Events, retried).
	for o, err := range l.steering.unplacedFailures(mask) {
		if res.Failed == nil {
			res.Failed = map[dataplane.Origin]error{}
		}
		res.Failed[o] = errors.Join(res.Failed[o], err)
	}
	l.logFailures(res.Failed)
	l.reportConflicts(res.Conflicts)
	// A removal that failed (logged and counted by the dataplane) left something stale that no
	// object owns any more: retried as a failed object is.
	if applyFailed(objects, res.Failed) || len(res.Removals) > 0 {
		l.retry.failed()
	} else {
		l.retry.reset()
	}
	// An object reports what the dataplane failed of it, else what failed to compile (the
	// dataplane keeps enforcing its previous rules then, and may have nothing to say).
	invalid := map[dataplane.Origin]bool{} // those alone: a node checks 10,000 firewalls
	for o := range objects.Failures() {
		if res.Failed[o] == nil {
			invalid[o] = true
		}
	}
	for o, err := range res.Failed {
		if _, reported := objects.Get(o); reported && err != nil {
			objects.Set(o, err)
		}
	}
	blamePods(objects, res.Failed)
	l.deps.Metrics.observeObjects(objects, res.Failed, invalid)
	if l.deps.Status != nil {
		l.deps.Status.Report(objects, firewallNotes(objects, l.deps.DNS.Capped()), res, marks)
	}
	if !l.synced.Swap(true) {
		l.deps.Log.Info("first sync finished", "duration", time.Since(start).Round(time.Microsecond))
	}
}

// EventRecorder records an Event on an object (client-go's record.EventRecorder has this).
type EventRecorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
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
	l.deps.Metrics.OutsideNetworks.Set(float64(outside))
	if outside != l.outside && outside > 0 {
		l.deps.Log.Warn("pod addresses outside the cluster networks: traffic to them is judged as leaving the cluster; set --cluster-cidr",
			"addresses", outside, "example", example, "networks", in.Networks)
	}
	l.outside = outside
}
