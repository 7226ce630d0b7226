package main

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	egressdv1alpha1 "github.com/egressd/egressd/api/egressd/v1alpha1"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	cloudv1 "github.com/egressd/egressd/api/cloudnetwork/v1"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
	"github.com/egressd/egressd/internal/version"
	"github.com/egressd/egressd/nodeagent/cloudprivateip"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/nodeagent/egressrouter"
	"github.com/egressd/egressd/nodeagent/egressservice"
	"github.com/egressd/egressd/nodeagent/leader"
	"github.com/egressd/egressd/nodeagent/reachability"
	"github.com/egressd/egressd/nodeagent/status"
	"github.com/egressd/egressd/watchers"
)

// controllerMain runs `egressd controller`: every cluster-wide decision (EgressIP assignment
// and its cloud requests, EgressService hosts and their node labels, EgressRouter placement,
// the aggregate statuses), in the replica holding the Lease. It never touches a node's kernel;
// the agents program their nodes from what it writes, and keep doing so while it is away.
func controllerMain(args []string, stderr io.Writer) int {
	cfg, err := parseControllerFlags(args, stderr)
	if err != nil {
		return usageError("egressd controller", err)
	}
	log := newLogger(cfg.verbosity, cfg.logFormat, "component", "controller", "identity", cfg.identity)
	return runUntilSignal(log, "egressd controller", 0, func(ctx context.Context) error { return runController(ctx, cfg, log) })
}

// placementReads are the kinds whose changes, of status too, the EgressIP and EgressService
// controllers look at: every kind but those whose status the leader writes from the
// NodeReports (EgressFirewall, EgressQoS, external route), which they never read. Those writes
// woke both at each one: when every node wrote an entry, 20,000 entries, each a reconcile that
// parses 5,000 nodes, most of the controller's CPU at full size (its profile).
var placementReads = []any{&corev1.Node{}, &corev1.Namespace{}, &corev1.Pod{}, &corev1.Service{},
	&discoveryv1.EndpointSlice{}, &networkingv1.ServiceCIDR{}, &ovnv1.EgressIP{}, &ovnv1.EgressService{},
	&netopv1.EgressRouter{}, &cloudv1.CloudPrivateIPConfig{}}

// prober is what the controllers probe egress nodes with: a Prober, or Unprobed when the
// reachability probes are disabled.
type prober interface {
	leader.Reachability
	Stop()
}

type unprobed struct{ reachability.Unprobed }

func (unprobed) Stop() {}

func newProber(cfg *reachability.Config) prober {
	if cfg == nil {
		return unprobed{}
	}
	return reachability.NewProber(*cfg)
}

func runController(ctx context.Context, cfg *controllerConfig, log *slog.Logger) error {
	log.Info("starting egressd controller", "version", version.String(), "lease", cfg.leaderElectionNS+"/"+leader.LeaseName,
		"leaseDuration", cfg.leaseDuration, "reachabilityTotalTimeout", cfg.reachTotalTimeout)
	// The controller writes every object's status and assignment for the whole cluster: a
	// higher client rate than an agent's own entries.
	api, reads, err := clients(cfg.kubeconfig, "egressd-controller/"+version.Version+" "+cfg.identity, cfg.apiRate, log)
	if err != nil {
		return err
	}
	kube, egress := api.kube, api.egress
	// Of the pods, the controller reads only the router pods it places.
	w, err := watchers.New(reads.kube, reads.egress, 0,
		watchers.OnlyPods(labels.SelectorFromSet(labels.Set{egressrouter.AppLabel: egressrouter.AppValue})), watchers.NodeReports())
	if err != nil {
		return err
	}
	recorder, stopEvents := eventRecorder(ctx, kube, "egressd-controller", cfg.identity)
	defer stopEvents()
	networks := cluster.NetworkFlags{Pods: cfg.clusterCIDRs, Services: cfg.serviceCIDRs}

	reg := prometheus.NewRegistry()
	leaderMetrics := leader.NewMetrics()
	eipMetrics, serviceMetrics := egressip.NewMetrics(), egressservice.NewMetrics()
	eipProber, serviceProber := newProber(cfg.reachability()), newProber(cfg.reachability())
	defer eipProber.Stop()
	defer serviceProber.Stop()
	// A router moved is a pod deleted and made again, every connection through it reset: its
	// node must be silent for 2 s (4 probes 500 ms apart), not the probe window that moves an
	// egress IP. Disabled with the others.
	routerProbes := &reachability.Config{Interval: 500 * time.Millisecond, Misses: 4}
	if cfg.reachability() == nil {
		routerProbes = nil
	}
	routerProber := newProber(routerProbes)
	defer routerProber.Stop()
	reg.MustRegister(controllerCollectors(leaderMetrics, eipProber, eipMetrics, serviceMetrics)...)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	aggregator := &status.Aggregator{Client: egress, Snapshot: w.Snapshot(),
		Changed: w.Subscribe(true, &ovnv1.EgressFirewall{}, &ovnv1.EgressQoS{}, &ovnv1.AdminPolicyBasedExternalRoute{}, &corev1.Node{}, &egressdv1alpha1.NodeReport{}),
		Ignore:  cfg.statusIgnore, PerNodeUpTo: cfg.statusPerNodeUpTo, Log: log.With("component", "status-aggregator")}
	egressIPs := &egressip.Controller{Client: egress, Snapshot: w.Snapshot(), Changed: w.Subscribe(true, placementReads...), Probes: eipProber,
		HealthPort: cfg.healthPort, Recorder: recorder, Log: log.With("component", "egressip-controller"), Metrics: eipMetrics, Self: cfg.nodeName,
		Cloud: cfg.egressIPCloud, CloudIPs: &cloudprivateip.Requester{Client: egress, Recorder: recorder, Log: log.With("component", "cloudprivateip")}}
	egressServices := &egressservice.Controller{Client: egress, Kube: kube, Snapshot: w.Snapshot(), Changed: w.Subscribe(true, placementReads...),
		Networks: networks, Probes: serviceProber, HealthPort: cfg.healthPort, Recorder: recorder,
		Log: log.With("component", "egressservice-controller"), Metrics: serviceMetrics, Self: cfg.nodeName}
	egressRouters := &egressrouter.Controller{Client: egress, Kube: kube, Snapshot: w.Snapshot(), Changed: w.Subscribe(false),
		Probes: routerProber, HealthPort: cfg.healthPort, Image: cfg.routerImage, Recorder: recorder,
		Log: log.With("component", "egressrouter-controller")}

	// The standbys' own subscriptions, taken before the watchers start (Subscribe is not safe
	// once they run).
	eipNodes, serviceNodes := w.Subscribe(false, &corev1.Node{}), w.Subscribe(false, &corev1.Node{})

	var synced atomic.Bool
	servers, err := serve(endpoints{health: cfg.healthAddr, metrics: cfg.metricsAddr, profiling: cfg.profilingAddr(),
		guard: metricsGuard(cfg.metricsAuth, kube, log)}, reg, synced.Load, log)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer shutdown(log, &wg, w, servers)
	if err := w.Start(ctx, log); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	synced.Store(true)
	// A standby keeps its caches and its probes of egress nodes warm: taking over, it moves an
	// egress IP off a node that failed with the leader's without waiting for probes of its own.
	wg.Go(func() { egressIPs.Standby(ctx, eipNodes) })
	wg.Go(func() { egressServices.Standby(ctx, serviceNodes) })
	elector := &leader.LeaderElection{
		Client: kube, Namespace: cfg.leaderElectionNS, Identity: cfg.identity,
		Controllers: []leader.Controller{aggregator.Run, egressIPs.Run, egressServices.Run, egressRouters.Run},
		Metrics:     leaderMetrics, Log: log.With("component", "leader-election"),
		LeaseDuration: cfg.leaseDuration, RenewDeadline: cfg.renewDeadline, RetryPeriod: cfg.retryPeriod,
	}
	wg.Go(func() {
		if err := elector.Run(ctx); err != nil {
			log.Error("leader election", "err", err)
		}
	})
	<-ctx.Done()
	log.Info("shutting down")
	return nil
}

// controllerCollectors are the controller's metrics: who leads, the EgressIP assignment, the
// EgressService election and the reachability probes of egress nodes. The metrics reference
// (docs/reference/controller-metrics.md) is generated from the same list.
func controllerCollectors(lm *leader.Metrics, probes prober, eip *egressip.Metrics, svc *egressservice.Metrics) []prometheus.Collector {
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "egressd_controller_build_info",
		Help: "1, labelled with the version of this controller.",
	}, []string{"version"})
	info.WithLabelValues(version.String()).Set(1)
	out := slices.Concat(lm.Collectors(), eip.Collectors(), svc.Collectors(), []prometheus.Collector{info})
	if p, ok := probes.(*reachability.Prober); ok {
		out = append(out, p.Collectors()...)
	}
	return out
}
