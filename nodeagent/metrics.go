package nodeagent

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/egressd/egressd/dataplane"
)

// Metrics are the agent's Prometheus metrics, on their own registry (no global state).
type Metrics struct {
	Registry     *prometheus.Registry
	SyncDuration *prometheus.HistogramVec
	SyncErrors   *prometheus.CounterVec
	Leader       prometheus.Gauge
	// Latency is from an object change arriving to the kernel being programmed for it.
	Latency prometheus.Histogram
	// SteeredPaths names the object of each steering mark (egressctl routes reads it: the
	// kernel's rules and tables know only the mark).
	SteeredPaths *prometheus.GaugeVec
	// OutsideNetworks counts local pod addresses outside the cluster networks: pod-to-pod traffic
	// to them would be judged as leaving the cluster (a CNI whose IPAM is not the Nodes'
	// podCIDRs needs --cluster-cidr).
	OutsideNetworks prometheus.Gauge
}

// NewMetrics registers the agent's metrics and the Go and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "egressd_sync_duration_seconds",
			Help:    "Duration of one sync step (compile of a feature, or apply), by feature.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"feature"}),
		SyncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_sync_errors_total",
			Help: "Sync steps that failed, by feature.",
		}, []string{"feature"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressd_programming_latency_seconds",
			Help:    "Time from an API object change reaching this agent to the node's kernel being programmed for it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		SteeredPaths: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressd_steered_path_pod_addresses",
			Help: "Local pod addresses steered through the path of an object (EgressIP, AdminPolicyBasedExternalRoute, EgressService), by the skb->mark that selects its ip rules and table.",
		}, []string{"kind", "object", "mark"}),
		OutsideNetworks: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressd_pod_addresses_outside_cluster_networks",
			Help: "Local pod addresses outside the cluster networks (discovered from the Nodes' spec.podCIDRs unless --cluster-cidr is set); nonzero means the networks are wrong.",
		}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressd_leader",
			Help: "1 while this agent holds the leader Lease and runs the cluster controllers.",
		}),
	}
	m.Registry.MustRegister(m.SyncDuration, m.SyncErrors, m.Leader, m.Latency, m.SteeredPaths, m.OutsideNetworks,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observePaths sets SteeredPaths from the state about to be applied: per table of a steering
// path, its mark and the local pod addresses that carry it.
func (m *Metrics) observePaths(s *dataplane.State) {
	m.SteeredPaths.Reset()
	for _, t := range s.Routing.Tables {
		i := slices.IndexFunc(s.Routing.Rules, func(r dataplane.RouteRule) bool { return r.Network == "" && r.Table == t.ID })
		if i < 0 {
			continue
		}
		mark := s.Routing.Rules[i].Mark
		pods := 0
		for _, p := range s.Classifier.Pods {
			if p.Mark == mark {
				pods += len(p.IPs)
			}
		}
		object := t.Origin.Name
		if t.Origin.Namespace != "" {
			object = t.Origin.Namespace + "/" + t.Origin.Name
		}
		m.SteeredPaths.WithLabelValues(string(t.Origin.Kind), object, fmt.Sprintf("%#x", mark)).Set(float64(pods))
	}
}
