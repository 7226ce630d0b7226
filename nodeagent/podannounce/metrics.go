package podannounce

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the announcements a node sends and receives.
type Metrics struct {
	announcements *prometheus.CounterVec
	duration      prometheus.Histogram
}

// NewMetrics creates the metrics; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		announcements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_pod_announcements_total",
			Help: "New pods announced to their egress nodes' agents (sent) and by other nodes' agents (received), by result: served (the egress node SNATs the pod), not_served, failed (no answer in time), denied (the announcement did not match the receiver's view of the API).",
		}, []string{"direction", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressd_pod_announcement_seconds",
			Help:    "Time from announcing a new pod to an egress node's agent to its answer (its SNAT programmed), which a CNI ADD waits for.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 12),
		}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.announcements, m.duration}
}

func (m *Metrics) sent(result string, took time.Duration) {
	if m == nil {
		return
	}
	m.announcements.WithLabelValues("sent", result).Inc()
	if result != "failed" {
		m.duration.Observe(took.Seconds())
	}
}

func (m *Metrics) received(result string) {
	if m != nil {
		m.announcements.WithLabelValues("received", result).Inc()
	}
}
