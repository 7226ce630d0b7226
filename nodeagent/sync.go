// Package nodeagent is egressd's brain: per feature, a pure compile step from the cluster
// snapshot to the desired node state; a level-triggered sync loop that hands that state to the
// dataplane and writes status from the result; and the leader-elected cluster controllers.
package nodeagent

import (
	"context"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/watchers"
)

// feature is one API's compile step: it adds the feature's part of the node state.
type feature struct {
	name    string
	compile func(in *input, into *dataplane.State) error
}

// input of the compile steps.
type input struct {
	snap    *watchers.Snapshot
	node    string
	cluster []netip.Prefix
	// lookup returns the current addresses of a DNS name.
	lookup func(name string) []netip.Addr
	// dnsNames collects the names the policies refer to.
	dnsNames []string
	// memo keeps compile results that depend only on an object's spec, across syncs.
	memo *memo
}

// Names is what the sync loop needs of a DNS resolver.
type Names interface {
	Want(names []string)
	Lookup(name string) []netip.Addr
	Changed() <-chan struct{}
}

// SyncLoop recomputes the whole desired state after any change and applies it.
type SyncLoop struct {
	Node string
	// ClusterNetworks (pod and service CIDRs) are never subject to EgressFirewall.
	ClusterNetworks []netip.Prefix
	Snapshot        *watchers.Snapshot
	Changed         <-chan struct{}
	// KernelChanged signals kernel changes that need the state applied again (links).
	KernelChanged <-chan struct{}
	Applier       dataplane.Applier
	// Status, when set, reports each sync's outcome on the API objects.
	Status *StatusWriter
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

	synced atomic.Bool
	memo   memo
	// failing is the last error logged per object, so that a persistent failure is logged
	// when it starts or changes, not at every sync.
	failing map[dataplane.Origin]string
}

// features are the compile steps, in order.
var features = []feature{
	{name: "pods", compile: compileLocalPods},
	{name: "egressfirewall", compile: compileFirewalls},
	{name: "service-backends", compile: compileServiceBackends},
	{name: "egressqos", compile: compileQoS},
}

// Synced reports whether the first sync has finished (readiness).
func (l *SyncLoop) Synced() bool { return l.synced.Load() }

// Run syncs once, then after every debounced change or resync period, until ctx ends.
func (l *SyncLoop) Run(ctx context.Context) {
	resync := time.NewTicker(l.Resync)
	defer resync.Stop()
	for {
		l.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-resync.C:
		case <-l.KernelChanged:
		case <-l.DNS.Changed():
		case <-l.Changed:
			select { // let a burst of events settle
			case <-ctx.Done():
				return
			case <-time.After(l.Debounce):
			}
		}
	}
}

func (l *SyncLoop) sync(ctx context.Context) {
	var since time.Time
	if l.PendingSince != nil {
		since = l.PendingSince()
	}
	state := dataplane.State{ClusterNetworks: l.ClusterNetworks}
	in := &input{snap: l.Snapshot, node: l.Node, cluster: l.ClusterNetworks, lookup: l.DNS.Lookup, memo: &l.memo}
	for _, f := range features {
		start := time.Now()
		err := f.compile(in, &state)
		l.Metrics.SyncDuration.WithLabelValues(f.name).Observe(time.Since(start).Seconds())
		if err != nil {
			l.Metrics.SyncErrors.WithLabelValues(f.name).Inc()
			l.Log.Error("compile failed", "feature", f.name, "err", err)
		}
	}
	l.DNS.Want(in.dnsNames)
	start := time.Now()
	res := l.Applier.Apply(ctx, &state)
	l.Metrics.SyncDuration.WithLabelValues("apply").Observe(time.Since(start).Seconds())
	if !since.IsZero() {
		l.Metrics.Latency.Observe(time.Since(since).Seconds())
	}
	failing := map[dataplane.Origin]string{}
	for origin, err := range res.Failed {
		l.Metrics.SyncErrors.WithLabelValues("apply").Inc()
		failing[origin] = err.Error()
		if l.failing[origin] != err.Error() {
			l.Log.Error("apply failed", "object", origin.String(), "err", err)
		}
	}
	for origin := range l.failing {
		if _, still := failing[origin]; !still {
			l.Log.Info("applied again", "object", origin.String())
		}
	}
	l.failing = failing
	if l.Status != nil {
		l.Status.Report(&state, res)
	}
	if !l.synced.Swap(true) {
		l.Log.Info("first sync finished", "duration", time.Since(start).Round(time.Microsecond))
	}
}
