package nodeagent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the agent's Prometheus metrics, on their own registry (no global state).
type Metrics struct {
	Registry     *prometheus.Registry
	SyncDuration *prometheus.HistogramVec
	SyncErrors   *prometheus.CounterVec
	Leader       prometheus.Gauge
	// Latency is from an object change arriving to the kernel being programmed for it.
	Latency prometheus.Histogram
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
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressd_leader",
			Help: "1 while this agent holds the leader Lease and runs the cluster controllers.",
		}),
	}
	m.Registry.MustRegister(m.SyncDuration, m.SyncErrors, m.Leader, m.Latency,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
