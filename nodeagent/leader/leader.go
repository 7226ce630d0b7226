// Package leader runs the controller's cluster-wide decisions in one replica at a time, by a
// coordination Lease, and keeps the standby replicas warm: the Lease (LeaderElection), and the
// loops the features' controllers share (loops.go): the leader's reconcile loop with its
// probes of nodes, the standby's, and the check that the leader is not the one cut off.
package leader

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaseName is the coordination Lease the controller's replicas compete for: the one the agents
// of releases before the controller held, so that during the upgrade the last such leader and
// the new controller never decide at once.
const LeaseName = "egressd-leader"

// Controller is a cluster-wide controller run only by the leader, until ctx ends.
type Controller func(ctx context.Context)

// Metrics say who leads.
type Metrics struct {
	Leader prometheus.Gauge
	// Holder names the replica holding the Lease, as this one last observed it.
	Holder *prometheus.GaugeVec
}

// NewMetrics returns the leader election's metrics, for the caller's registry.
func NewMetrics() *Metrics {
	return &Metrics{
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressd_leader",
			Help: "1 while this controller replica holds the leader Lease and runs the cluster controllers.",
		}),
		Holder: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressd_leader_holder",
			Help: "1 for the replica holding the leader Lease (its identity: pod name, and node), as this replica last observed it.",
		}, []string{"identity"}),
	}
}

// Collectors are the metrics, for the caller's registry.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Leader, m.Holder}
}

// LeaderElection runs the cluster controllers while this replica holds the Lease.
type LeaderElection struct {
	Client      kubernetes.Interface
	Namespace   string
	Identity    string
	Controllers []Controller
	Metrics     *Metrics
	Log         *slog.Logger

	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// leading is held by a term's lead until its controllers returned: client-go starts the
	// next term's without waiting for the last's, which a lost and retaken Lease would
	// otherwise run side by side with them. A token in a channel of one (made on first use),
	// not a mutex: a lead waiting for the last term is then durably blocked, which lets the
	// tests run it under testing/synctest.
	leadingOnce sync.Once
	leading     chan struct{}
	// endTerm cancels the running term's controllers (nil between terms); stepDown ends the
	// running client-go elector (its Run), which then releases the Lease.
	termMu   sync.Mutex
	endTerm  context.CancelFunc
	stepDown context.CancelFunc
	// renewed is when a write of the Lease naming this replica last succeeded (unix ns).
	renewed atomic.Int64
}

// Run campaigns for the Lease until ctx ends; on ctx end a held Lease is released so that
// another agent takes over at once instead of after LeaseDuration.
func (e *LeaderElection) Run(ctx context.Context) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: LeaseName, Namespace: e.Namespace},
		Client:     e.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
	}
	for ctx.Err() == nil { // a lost Lease ends RunOrDie: campaign again
		electorCtx, stepDown := context.WithCancel(ctx)
		e.termMu.Lock()
		e.stepDown = stepDown
		e.termMu.Unlock()
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lockGuard{Interface: lock, stopTerm: e.stopTerm, renewed: &e.renewed},
			LeaseDuration:   e.LeaseDuration,
			RenewDeadline:   e.RenewDeadline,
			RetryPeriod:     e.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: e.lead,
				OnStoppedLeading: func() {
					e.Metrics.Leader.Set(0)
					e.Log.Info("stopped leading", "lease", e.Namespace+"/"+LeaseName)
				},
				OnNewLeader: func(id string) {
					e.Metrics.Holder.Reset()
					e.Metrics.Holder.WithLabelValues(id).Set(1)
					e.Log.Info("leader", "identity", id)
				},
			},
		})
		if err != nil {
			stepDown()
			return err
		}
		le.Run(electorCtx)
		stepDown()
	}
	return nil
}

func (e *LeaderElection) lead(ctx context.Context) {
	leading := e.leadingToken()
	leading <- struct{}{}
	defer func() { <-leading }()
	if ctx.Err() != nil {
		return // this term ended while the last one's controllers were stopping
	}
	ctx, cancel := context.WithCancel(ctx)
	e.termMu.Lock()
	e.endTerm = cancel
	e.termMu.Unlock()
	defer func() {
		e.termMu.Lock()
		e.endTerm = nil
		e.termMu.Unlock()
		cancel()
	}()
	e.renewed.Store(time.Now().UnixNano()) // just acquired
	go e.watchRenewals(ctx)
	e.Metrics.Leader.Set(1)
	e.Log.Info("started leading, running cluster controllers", "lease", e.Namespace+"/"+LeaseName, "controllers", len(e.Controllers))
	var wg sync.WaitGroup
	for _, c := range e.Controllers {
		wg.Go(func() { c(ctx) })
	}
	wg.Wait()
}

// watchRenewals steps down once the Lease has gone the renew deadline without a renewal: a
// standby takes over a lease duration after it last saw one, and client-go itself gives up
// only a retry period later still, and releases before it cancels the controllers' context,
// with a read of the Lease that may take another renew deadline. A replica cut off and back
// meanwhile kept deciding beside the new leader (seen: an egress IP moved back and forth).
func (e *LeaderElection) watchRenewals(ctx context.Context) {
	t := time.NewTicker(max(e.RetryPeriod/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if since := time.Since(time.Unix(0, e.renewed.Load())); since > e.RenewDeadline {
			e.Log.Warn("the Lease was not renewed within the renew deadline: stepping down", "lease", e.Namespace+"/"+LeaseName,
				"sinceRenewal", since.Round(time.Millisecond), "renewDeadline", e.RenewDeadline)
			e.termMu.Lock()
			if e.stepDown != nil {
				e.stepDown()
			}
			e.termMu.Unlock()
			return
		}
	}
}

// stopTerm ends the running term's controllers and waits until they returned.
func (e *LeaderElection) stopTerm() {
	e.termMu.Lock()
	if e.endTerm != nil {
		e.endTerm()
	}
	e.termMu.Unlock()
	leading := e.leadingToken()
	leading <- struct{}{} // held by lead until its controllers returned
	<-leading
}

// leadingToken is the channel holding the running term's token (see leading).
func (e *LeaderElection) leadingToken() chan struct{} {
	e.leadingOnce.Do(func() { e.leading = make(chan struct{}, 1) })
	return e.leading
}

// lockGuard records each successful write of the Lease naming this replica (its renewals, for
// watchRenewals), and guards client-go's release of the Lease (an empty holder written), which
// it makes at every end of leadership, also after failing to renew:
//   - it first stops the term's controllers: client-go cancels their context only once the
//     release returned, and a replica cut off and back within that call would decide beside
//     the standby that took over (seen: an egress IP moved back by the old leader);
//   - it refuses to release a Lease that no longer names this replica: client-go judges from
//     its last observed record, and a replica cut off for longer than the Lease, coming back,
//     would otherwise clear the new leader's Lease and take it over.
type lockGuard struct {
	resourcelock.Interface
	stopTerm func()
	renewed  *atomic.Int64
}

func (g lockGuard) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := g.Interface.Create(ctx, rec)
	g.record(rec, err)
	return err
}

func (g lockGuard) record(rec resourcelock.LeaderElectionRecord, err error) {
	if err == nil && rec.HolderIdentity == g.Identity() && g.renewed != nil {
		g.renewed.Store(time.Now().UnixNano())
	}
}

func (g lockGuard) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	if rec.HolderIdentity == "" {
		g.stopTerm()
		cur, _, err := g.Interface.Get(ctx)
		if err != nil {
			return fmt.Errorf("read the Lease before releasing it: %w", err)
		}
		if cur.HolderIdentity != g.Identity() {
			return fmt.Errorf("not releasing the Lease: %q holds it now", cur.HolderIdentity)
		}
	}
	err := g.Interface.Update(ctx, rec)
	g.record(rec, err)
	return err
}
