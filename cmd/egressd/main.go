// Command egressd is the node agent: it watches the egress APIs and programs this node's kernel.
// `egressd controller` makes the cluster-wide decisions (controller.go); `egressd router-pod`
// and `egressd install-cni` are the small jobs of a router pod and of the DaemonSet's init
// container.
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
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/dnsanswers"
	"github.com/egressd/egressd/dataplane/kernel"
	"github.com/egressd/egressd/internal/cniinstall"
	"github.com/egressd/egressd/internal/httpauth"
	"github.com/egressd/egressd/internal/version"
	"github.com/egressd/egressd/nodeagent"
	"github.com/egressd/egressd/nodeagent/cniserver"
	"github.com/egressd/egressd/nodeagent/egressrouter"
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
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "router-pod":
			os.Exit(routerPod(os.Args[2:], os.Stderr))
		case "install-cni":
			os.Exit(installCNI(os.Args[2:], os.Stderr))
		case "controller":
			os.Exit(controllerMain(os.Args[2:], os.Stderr))
		}
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(usageError("egressd", err))
	}
	log := newLogger(cfg.verbosity, cfg.logFormat, "node", cfg.nodeName)
	os.Exit(runUntilSignal(log, "egressd", agentHeadroom, func(ctx context.Context) error { return run(ctx, cfg, log) }))
}

// usageError reports a command line error (not --help) and returns the exit code.
func usageError(command string, err error) int {
	if !errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintln(os.Stderr, command+":", err)
	}
	return 2
}

// runUntilSignal runs a process's main function until SIGTERM or SIGINT, its collector given
// gcHeadroom (tuneGC); the exit code.
func runUntilSignal(log *slog.Logger, what string, gcHeadroom uint64, run func(ctx context.Context) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	tuneGC(ctx, log, gcHeadroom)
	if err := run(ctx); err != nil {
		log.Error(what+" failed", "err", err)
		return 1
	}
	log.Info(what + " stopped")
	return 0
}

// newLogger is the process's structured log, with attrs on every line.
func newLogger(verbosity int, format string, attrs ...any) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(-4 * min(verbosity, 1))}
	var h slog.Handler = slog.NewJSONHandler(os.Stderr, opts)
	if format == "text" {
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	log := slog.New(h).With(attrs...)
	// client-go logs through klog: route it into the same structured stream.
	klog.SetSlogLogger(log.With("component", "client-go"))
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	_ = kfs.Set("v", fmt.Sprint(max(verbosity-1, 0)))
	return log
}

func run(ctx context.Context, cfg *config, log *slog.Logger) error {
	log.Info("starting egressd", "version", version.String(), "pinRoot", cfg.bpfPinRoot,
		"clusterCIDRs", cfg.clusterCIDRs.String(), "serviceCIDRs", cfg.serviceCIDRs.String())
	api, reads, err := clients(cfg.kubeconfig, "egressd/"+version.Version+" node="+cfg.nodeName, cfg.apiRate, log)
	if err != nil {
		return err
	}
	kube, egress := api.kube, api.egress

	metrics := nodeagent.NewMetrics()
	w, err := watchers.New(reads.kube, reads.egress, 0, watchers.NodePods(cfg.nodeName),
		watchers.TrimEgress(status.Unread))
	if err != nil {
		return err
	}
	// New pods announced by the CNI plugin (this node's) and by other nodes' agents (their pods
	// this node is an egress node of), before their Pod objects show their addresses; a new
	// pod's ADD returns once the dataplane has it in force.
	store := cniserver.NewStore()
	if cfg.cniCacheDir != "" {
		store.Runtime = &cniserver.RuntimeCache{Dir: cfg.cniCacheDir, Every: 10 * time.Second}
	}
	dp, err := kernel.New(kernel.Options{PinRoot: cfg.bpfPinRoot, Classifier: classifier.Options{ACLLogRate: uint32(cfg.aclLogRate), MarkMask: cfg.markMask}, Routing: cfg.routing,
		Tunnel: cfg.tunnel, AddressLifetime: cfg.addressLifetime, PodsInForce: store.InForce, RPFilterState: cfg.rpFilterState(), LoosenRPFilter: cfg.loosenRPFilter,
		CiliumNodeConfig: cfg.ciliumNodeConfig, FullPass: cfg.resync},
		log.With("component", "dataplane"))
	if err != nil {
		return err
	}
	defer dp.Close()
	recorder, stopEvents := eventRecorder(ctx, kube, "egressd", cfg.nodeName)
	defer stopEvents()
	statusWriter := &status.Reporter{Node: cfg.nodeName, Client: egress, Kube: kube, Snapshot: w.Snapshot(), Recorder: recorder,
		Changed: w.Snapshot().Marks.Moved(), RouteGateways: externalroute.ConfiguredGateways, Metrics: status.NewMetrics(),
		Log: log.With("component", "status")}
	resolver := dnsnames.New(ctx, cfg.dnsServers, cfg.dnsMinTTL, cfg.dnsState(), log.With("component", "dns"))
	resolver.LimitNamespaces(cfg.dnsPerNamespace)
	dnsMetrics := dnsanswers.NewMetrics()
	if cfg.dnsAnswersQueue != 0 {
		answers := &dnsanswers.Reader{Queue: cfg.dnsAnswersQueue, Learner: resolver, Namespace: dp.SnoopedNamespace, Metrics: dnsMetrics, Log: log.With("component", "dns-answers")}
		go func() {
			if err := answers.Run(ctx); err != nil {
				log.Error("DNS answers to pods are not read: dnsName rules allow what the agent resolves, wildcard rules nothing", "err", err)
			}
		}()
	}
	loop := nodeagent.New(cfg.syncConfig(), nodeagent.Deps{
		Snapshot:     w.Snapshot(),
		Changed:      w.Subscribe(false),
		Kernel:       dp.Changed(),
		Urgent:       dp.Urgent(),
		PendingSince: w.TakePending,
		ServePods:    w.ServePods,
		DNS:          resolver,
		Applier:      dp,
		Status:       statusWriter,
		Recorder:     recorder,
		Announced:    store,
		Metrics:      metrics,
		Log:          log.With("component", "sync"),
	})
	announceMetrics := podannounce.NewMetrics()
	cniMetrics := cniserver.NewMetrics()
	metrics.Registry.MustRegister(agentCollectors(dp, announceMetrics, cniMetrics, dnsMetrics, resolver, statusWriter.Metrics)...)

	announcer := &podannounce.Announcer{Node: cfg.nodeName, Port: cfg.healthPort, TokenFile: cfg.announceToken, Metrics: announceMetrics,
		Log: log.With("component", "pod-announce")}
	defer announcer.Close()
	// The CNI socket is served before the caches sync: a plugin's ADD waits for the first sync.
	installed := make(chan struct{}) // the installer stopped
	var ownDaemonSet *daemonSetWatch
	if cfg.cniSocket != "" {
		cs := &cniserver.Server{Node: cfg.nodeName, Store: store, Pods: w.Snapshot().Pods, Kube: kube,
			Synced: loop.Synced, Peers: announcer, Metrics: cniMetrics, Log: log.With("component", "cni"),
			Routers: &egressrouter.Node{Node: cfg.nodeName, Snapshot: w.Snapshot(), Networks: cfg.networks(),
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
				defer close(installed)
				if err := in.Run(ctx); err != nil {
					log.Error("egressd-cni not installed: new pods are programmed from the API only", "component", "cni-install", "err", err)
				}
			}()
			if cfg.cniDaemonSet != "" {
				ownDaemonSet = watchDaemonSet(ctx, kube, cfg.podNamespace, cfg.cniDaemonSet, log.With("component", "cni-install"))
			}
		}
	}
	servers, err := serve(endpoints{health: cfg.healthAddr, metrics: cfg.metricsAddr, profiling: cfg.profilingAddr(),
		guard: metricsGuard(cfg.metricsAuth, kube, log)}, metrics.Registry, loop.Synced, log)
	if err != nil {
		return err
	}
	if cfg.reachabilityAddr != "0" {
		receiver := &podannounce.Receiver{Snapshot: w.Snapshot(), Store: store, Metrics: announceMetrics,
			Auth: &podannounce.TokenReviewer{Client: kube, Identity: cfg.announceIdentity},
			Log:  log.With("component", "pod-announce")}
		rs := reachability.NewServer(cfg.reachabilityAddr, receiver.Register)
		metrics.Registry.MustRegister(rs.Collectors()...)
		if err := rs.Start(); err != nil {
			return err
		}
		defer rs.Stop()
		log.Info("serving", "addr", rs.Addr().String(), "what", "egress health check")
	}
	var wg sync.WaitGroup
	defer shutdown(log, &wg, w, servers)

	if err := w.Start(ctx, log); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	wg.Go(func() { loop.Run(ctx) })
	wg.Go(func() { statusWriter.Run(ctx) })
	<-ctx.Done()
	log.Info("shutting down")
	select { // what the resolver learned last, kept for the next agent
	case <-resolver.Stopped():
	case <-time.After(5 * time.Second):
	}
	if ownDaemonSet != nil {
		<-installed // it would chain egressd-cni again
		ownDaemonSet.unchainIfDeleted(cfg.cniConfDir)
	}
	return nil
}

// agentCollectors are the metrics the agent registers besides nodeagent.Metrics' own: the
// dataplane's, the pod announcements', the CNI plugin's calls', the DNS answers' and the
// node report's. The metrics reference (docs/reference/metrics.md) is generated from the
// same list, and the egress health server's (registered where it starts).
func agentCollectors(dp *kernel.Applier, announce *podannounce.Metrics, cni *cniserver.Metrics, dns *dnsanswers.Metrics, resolver *dnsnames.Resolver, statuses *status.Metrics) []prometheus.Collector {
	return slices.Concat(dp.Collectors(), announce.Collectors(), cni.Collectors(), dns.Collectors(), resolver.Collectors(), statuses.Collectors())
}

// eventRecorder records Events (on the objects whose status says why they failed), as
// component egressd (the agent) or egressd-controller, from host.
func eventRecorder(ctx context.Context, kube kubernetes.Interface, component, host string) (record.EventRecorder, func()) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = ovnv1.AddToScheme(scheme)
	_ = netopv1.AddToScheme(scheme)
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(scheme, corev1.EventSource{Component: component, Host: host}), b.Shutdown
}

// apiClients are the clients of both APIs egressd uses.
type apiClients struct {
	kube   kubernetes.Interface
	egress versioned.Interface
}

// clients of the API server from a kubeconfig (in-cluster when ""), with the process's user
// agent and client-side rate limit: for requests, and for the informers (reads), whose lists
// and watches wait out an API server outage rather than fail (watchers.ReadConfig).
func clients(kubeconfig, userAgent string, rate apiRate, log *slog.Logger) (requests, reads apiClients, err error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return requests, reads, fmt.Errorf("kubeconfig %q: %w", kubeconfig, err)
	}
	cfg.UserAgent = userAgent
	cfg.QPS, cfg.Burst = rate.qps, rate.burst
	if requests, err = clientsFor(cfg); err != nil {
		return requests, reads, err
	}
	reads, err = clientsFor(watchers.ReadConfig(cfg, log.With("component", "watchers")))
	return requests, reads, err
}

func clientsFor(cfg *rest.Config) (apiClients, error) {
	// Core objects as protobuf, as kube-proxy and the kubelet read them: decoding every Pod,
	// Node and EndpointSlice event as JSON was a third of an egress node's CPU at full scale.
	// The egress APIs are CRDs, which the API server serves as JSON only.
	core := rest.CopyConfig(cfg)
	core.ContentType = "application/vnd.kubernetes.protobuf"
	core.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	kube, err := kubernetes.NewForConfig(core)
	if err != nil {
		return apiClients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	egress, err := versioned.NewForConfig(cfg)
	if err != nil {
		return apiClients{}, fmt.Errorf("egress API client: %w", err)
	}
	return apiClients{kube, egress}, nil
}

// metricsGuard is the guard of the metrics and profiles (nil when --metrics-auth=false).
func metricsGuard(on bool, kube kubernetes.Interface, log *slog.Logger) *httpauth.Guard {
	if !on {
		return nil
	}
	return &httpauth.Guard{Client: kube, Log: log.With("component", "metrics-auth")}
}

// shutdown waits for the process's goroutines, stops the watchers and the HTTP servers (a
// second for requests in flight), within shutdownBudget: whatever hangs after SIGTERM must not
// hold the pod.
func shutdown(log *slog.Logger, wg *sync.WaitGroup, w *watchers.Watchers, servers []*http.Server) {
	timer := time.AfterFunc(shutdownBudget, func() {
		log.Error("shutdown took too long, exiting", "budget", shutdownBudget)
		os.Exit(1)
	})
	defer timer.Stop()
	wg.Wait()
	w.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
}

// endpoints are a process's HTTP addresses: /healthz and /readyz, /metrics ("0": none), and
// the runtime profiles on a loopback address ("": none); guard, when set, admits only callers
// allowed to get the metrics' and profiles' paths (the health endpoints stay open to the
// kubelet's probes).
type endpoints struct {
	health, metrics, profiling string
	guard                      *httpauth.Guard
}

func (eps endpoints) guarded(h http.Handler) http.Handler {
	if eps.guard != nil {
		return eps.guard.Wrap(h)
	}
	return h
}

// serve starts the metrics and health endpoints. Binding happens here, synchronously, so that a
// port in use fails the start with a clear error.
func serve(eps endpoints, reg *prometheus.Registry, ready func() bool, log *slog.Logger) ([]*http.Server, error) {
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "caches not synced or first sync not finished", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	handlers := map[string]http.Handler{eps.health: health}
	if eps.metrics != "0" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		if h := eps.guarded(mux); eps.metrics == eps.health {
			health.Handle("/metrics", h)
		} else {
			handlers[eps.metrics] = h
		}
	}
	if eps.profiling != "" {
		// Its own loopback listener: a profile is for someone on the node, never a pod's to
		// start (a CPU profile costs the agent while it runs).
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		handlers[eps.profiling] = eps.guarded(mux)
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
