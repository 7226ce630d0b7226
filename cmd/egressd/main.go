// Command egressd is the node agent: it watches the egress APIs and programs this node's kernel.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/egressd/egressd/api/generated/clientset/versioned"
	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
	netopv1 "github.com/egressd/egressd/api/networkoperator/v1"
	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/kernel"
	"github.com/egressd/egressd/internal/cniinstall"
	"github.com/egressd/egressd/internal/version"
	"github.com/egressd/egressd/nodeagent"
	"github.com/egressd/egressd/nodeagent/cloudprivateip"
	"github.com/egressd/egressd/nodeagent/cluster"
	"github.com/egressd/egressd/nodeagent/cniserver"
	"github.com/egressd/egressd/nodeagent/egressip"
	"github.com/egressd/egressd/nodeagent/egressrouter"
	"github.com/egressd/egressd/nodeagent/egressservice"
	"github.com/egressd/egressd/nodeagent/externalroute"
	"github.com/egressd/egressd/nodeagent/podannounce"
	"github.com/egressd/egressd/nodeagent/reachability"
	"github.com/egressd/egressd/nodeagent/status"
	"github.com/egressd/egressd/watchers"
	"github.com/egressd/egressd/watchers/dnsnames"
)

// shutdownBudget bounds the time from SIGTERM to exit, within the pod's grace period.
const shutdownBudget = 5 * time.Second

func main() {
	if len(os.Args) > 1 && os.Args[1] == "router-pod" {
		os.Exit(routerPod(os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "install-cni" {
		os.Exit(installCNI(os.Args[2:], os.Stderr))
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if !errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "egressd:", err)
		}
		os.Exit(2)
	}
	log := newLogger(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("egressd failed", "err", err)
		os.Exit(1)
	}
	log.Info("egressd stopped")
}

func newLogger(cfg *config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(-4 * min(cfg.verbosity, 1))}
	var h slog.Handler = slog.NewJSONHandler(os.Stderr, opts)
	if cfg.logFormat == "text" {
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	log := slog.New(h).With("node", cfg.nodeName)
	// client-go logs through klog: route it into the same structured stream.
	klog.SetSlogLogger(log.With("component", "client-go"))
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	_ = kfs.Set("v", fmt.Sprint(max(cfg.verbosity-1, 0)))
	return log
}

func run(ctx context.Context, cfg *config, log *slog.Logger) error {
	log.Info("starting egressd", "version", version.String(), "pinRoot", cfg.bpfPinRoot,
		"clusterCIDRs", cfg.clusterCIDRs.String(), "serviceCIDRs", cfg.serviceCIDRs.String())
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %q: %w", cfg.kubeconfig, err)
	}
	restCfg.UserAgent = "egressd/" + version.Version + " node=" + cfg.nodeName
	restCfg.QPS, restCfg.Burst = 50, 100
	kube, egress, err := clients(restCfg)
	if err != nil {
		return err
	}

	metrics := nodeagent.NewMetrics()
	w, err := watchers.New(kube, egress, 0)
	if err != nil {
		return err
	}
	// New pods announced by the CNI plugin (this node's) and by other nodes' agents (their pods
	// this node is an egress node of), before their Pod objects show their addresses; a new
	// pod's ADD returns once the dataplane has it in force.
	store := cniserver.NewStore()
	dp, err := kernel.New(kernel.Options{PinRoot: cfg.bpfPinRoot, Classifier: classifier.Options{ACLLogRate: uint32(cfg.aclLogRate), MarkMask: cfg.markMask}, Routing: cfg.routing,
		Tunnel: cfg.tunnel, AddressLifetime: cfg.addressLifetime, PodsInForce: store.InForce, RPFilterState: cfg.rpFilterState(), LoosenRPFilter: cfg.loosenRPFilter},
		log.With("component", "dataplane"))
	if err != nil {
		return err
	}
	defer dp.Close()
	loop := &nodeagent.SyncLoop{
		Node:         cfg.nodeName,
		Networks:     cluster.NetworkFlags{Pods: cfg.clusterCIDRs, Services: cfg.serviceCIDRs},
		Snapshot:     w.Snapshot(),
		Changed:      w.Subscribe(false),
		Triggers:     []<-chan struct{}{dp.Changed()},
		PendingSince: w.TakePending,
		DNS:          dnsnames.New(ctx, cfg.dnsServers, cfg.dnsMinTTL, log.With("component", "dns")),
		Applier:      dp,
		Metrics:      metrics,
		Log:          log.With("component", "sync"),
		Debounce:     cfg.debounce,
		MarkMask:     cfg.markMask,
		Steering:     cfg.steering,
		Routes:       externalroute.Compiler{Legacy: cfg.legacyGateways},
		GatewayBFD:   dataplane.BFDPeer{MinTx: cfg.gatewayBFD, MinRx: cfg.gatewayBFD, Multiplier: cfg.gatewayBFDMult},
		Resync:       cfg.resync,
	}

	recorder, stopEvents := eventRecorder(ctx, kube, cfg.nodeName)
	defer stopEvents()
	statusWriter := &status.Writer{Node: cfg.nodeName, Client: egress, Kube: kube, Snapshot: w.Snapshot(), Recorder: recorder,
		// Its entries' objects, and what the node's annotations and labels are made from.
		Changed: w.Subscribe(true, &ovnv1.EgressFirewall{}, &ovnv1.EgressQoS{}, &ovnv1.AdminPolicyBasedExternalRoute{},
			&ovnv1.EgressService{}, &corev1.Node{}),
		Log: log.With("component", "status")}
	loop.Status = statusWriter
	loop.Recorder = recorder
	aggregator := &status.Aggregator{Client: egress, Snapshot: w.Snapshot(),
		Changed: w.Subscribe(true, &ovnv1.EgressFirewall{}, &ovnv1.EgressQoS{}, &ovnv1.AdminPolicyBasedExternalRoute{}, &corev1.Node{}),
		Ignore:  cfg.statusIgnore,
		Log:     log.With("component", "status-aggregator")}
	prober := reachability.NewProber(reachability.Config{})
	defer prober.Stop()
	eipMetrics, serviceMetrics := egressip.NewMetrics(), egressservice.NewMetrics()
	announceMetrics := podannounce.NewMetrics()
	cniMetrics := cniserver.NewMetrics()
	metrics.Registry.MustRegister(componentCollectors(dp, prober, eipMetrics, serviceMetrics, announceMetrics, cniMetrics)...)
	egressIPs := &egressip.Controller{Client: egress, Snapshot: w.Snapshot(), Changed: w.Subscribe(true), Probes: prober,
		HealthPort: cfg.healthPort, Recorder: recorder, Log: log.With("component", "egressip-controller"), Metrics: eipMetrics,
		Cloud: cfg.egressIPCloud, Requester: &cloudprivateip.Requester{Client: egress, Recorder: recorder, Log: log.With("component", "cloudprivateip")}}

	// EgressService host election: its own prober (Set replaces the probed nodes), same port.
	serviceProber := reachability.NewProber(reachability.Config{})
	defer serviceProber.Stop()
	egressServices := &egressservice.Controller{Client: egress, Snapshot: w.Snapshot(), Changed: w.Subscribe(true),
		Networks: loop.Networks, Probes: serviceProber, HealthPort: cfg.healthPort, Recorder: recorder,
		Log: log.With("component", "egressservice-controller"), Metrics: serviceMetrics}

	// EgressRouter: the leader places router pods (its own prober); the node side answers
	// their CNI ADD with the router's configuration, which egressd-cni applies. A router moved
	// is a pod deleted and made again, every connection through it reset: its node must be
	// silent for 2 s (4 probes 500 ms apart), not the 450 ms that move an egress IP.
	routerProber := reachability.NewProber(reachability.Config{Interval: 500 * time.Millisecond, Misses: 4})
	defer routerProber.Stop()
	egressRouters := &egressrouter.Controller{Client: egress, Kube: kube, Snapshot: w.Snapshot(), Changed: w.Subscribe(false),
		Probes: routerProber, HealthPort: cfg.healthPort, Image: cfg.routerImage, Recorder: recorder,
		Log: log.With("component", "egressrouter-controller")}

	loop.Announced = store
	loop.Triggers = append(loop.Triggers, store.Changed())
	announcer := &podannounce.Announcer{Node: cfg.nodeName, Port: cfg.healthPort, Metrics: announceMetrics,
		Log: log.With("component", "pod-announce")}
	defer announcer.Close()
	// The CNI socket is served before the caches sync: a plugin's ADD waits for the first sync.
	if cfg.cniSocket != "" {
		cs := &cniserver.Server{Node: cfg.nodeName, Store: store, Pods: w.Snapshot().Pods, Kube: kube,
			Synced: loop.Synced, Peers: announcer, Metrics: cniMetrics, Log: log.With("component", "cni"),
			Routers: &egressrouter.Node{Node: cfg.nodeName, Snapshot: w.Snapshot(), Networks: loop.Networks,
				Client: egress, Recorder: recorder, Log: log.With("component", "egressrouter")}}
		if err := cs.Listen(cfg.cniSocket); err != nil {
			return err
		}
		defer cs.Close()
		if cfg.cniConfDir != "" {
			in := &cniinstall.Installer{Binary: cfg.cniBinary, BinDir: cfg.cniBinDir, ConfDir: cfg.cniConfDir,
				StatusFile: filepath.Join(filepath.Dir(cfg.cniSocket), filepath.Base(cniinstall.DefaultStatusFile)),
				Entry:      map[string]any{"type": cniinstall.PluginType, "socket": cfg.cniSocket, "failOpen": cfg.cniFailOpen},
				Log:        log.With("component", "cni-install")}
			go func() {
				if err := in.Run(ctx); err != nil {
					log.Error("egressd-cni not installed: new pods are programmed from the API only", "component", "cni-install", "err", err)
				}
			}()
		}
	}
	servers, err := serve(cfg, metrics, loop, log)
	if err != nil {
		return err
	}
	if cfg.reachabilityAddr != "0" {
		receiver := &podannounce.Receiver{Snapshot: w.Snapshot(), Store: store, Metrics: announceMetrics,
			Log: log.With("component", "pod-announce")}
		rs := reachability.NewServer(cfg.reachabilityAddr, receiver.Register)
		if err := rs.Start(); err != nil {
			return err
		}
		defer rs.Stop()
		log.Info("serving", "addr", rs.Addr().String(), "what", "egress health check")
	}
	var wg sync.WaitGroup
	defer func() {
		// Bound the shutdown: whatever hangs after SIGTERM must not hold the node's pod.
		timer := time.AfterFunc(shutdownBudget, func() {
			log.Error("shutdown took too long, exiting", "budget", shutdownBudget)
			os.Exit(1)
		})
		defer timer.Stop()
		wg.Wait()
		w.Shutdown()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for _, s := range servers {
			_ = s.Shutdown(sctx)
		}
	}()

	if err := w.Start(ctx, log); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	wg.Go(func() { loop.Run(ctx) })
	wg.Go(func() { statusWriter.Run(ctx) })
	elector := &nodeagent.LeaderElection{
		Client: kube, Namespace: cfg.leaderElectionNS, Identity: cfg.nodeName,
		Controllers: []nodeagent.Controller{aggregator.Run, egressIPs.Run, egressServices.Run, egressRouters.Run},
		Metrics:     metrics, Log: log.With("component", "leader-election"),
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

// componentCollectors are the metrics the agent registers besides nodeagent.Metrics' own: the
// dataplane's, those of the leader's EgressIP assignment, EgressService election and
// reachability probes, the pod announcements' and the CNI plugin's calls'. The metrics reference
// (docs/reference/metrics.md) is generated from the same list.
func componentCollectors(dp *kernel.Applier, prober *reachability.Prober, eip *egressip.Metrics, svc *egressservice.Metrics,
	announce *podannounce.Metrics, cni *cniserver.Metrics) []prometheus.Collector {
	return slices.Concat(dp.Collectors(), prober.Collectors(), eip.Collectors(), svc.Collectors(), announce.Collectors(), cni.Collectors())
}

// eventRecorder records Events (on the objects whose status says why they failed).
func eventRecorder(ctx context.Context, kube kubernetes.Interface, node string) (record.EventRecorder, func()) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = ovnv1.AddToScheme(scheme)
	_ = netopv1.AddToScheme(scheme)
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(scheme, corev1.EventSource{Component: "egressd", Host: node}), b.Shutdown
}

func clients(cfg *rest.Config) (kubernetes.Interface, versioned.Interface, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	egress, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("egress API client: %w", err)
	}
	return kube, egress, nil
}

// serve starts the metrics and health endpoints. Binding happens here, synchronously, so that a
// port in use fails the start with a clear error.
func serve(cfg *config, m *nodeagent.Metrics, loop *nodeagent.SyncLoop, log *slog.Logger) ([]*http.Server, error) {
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !loop.Synced() {
			http.Error(w, "caches not synced or first sync not finished", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	handlers := map[string]http.Handler{cfg.healthAddr: health}
	if cfg.metricsAddr != "0" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
		if cfg.profiling {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		if cfg.metricsAddr == cfg.healthAddr {
			health.Handle("/metrics", mux)
		} else {
			handlers[cfg.metricsAddr] = mux
		}
	}
	var servers []*http.Server
	for addr, h := range handlers {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			for _, s := range servers {
				s.Close()
			}
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, s)
		go func() {
			if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server", "addr", addr, "err", err)
			}
		}()
		log.Info("serving", "addr", l.Addr().String())
	}
	return servers, nil
}
