package status

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the node's status entries: how many wait, and how the writes went. An agent that
// starts on a cluster with thousands of firewalls writes an entry for each; these show it
// getting through them.
type Metrics struct {
	pending prometheus.Gauge
	writes  *prometheus.CounterVec
}

// NewMetrics creates the metrics; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egressd_status_entries_pending",
			Help: "This node's status entries (of EgressFirewalls, EgressQoSes and AdminPolicyBasedExternalRoutes) waiting to be written or looked at again; a failed write waits its retry outside this count.",
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_status_writes_total",
			Help: "Looks at this node's status entries, by result: written, in_place (the entry already said it), failed (tried again after a wait growing from 1 s to 30 s).",
		}, []string{"result"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.pending, m.writes}
}

func (m *Metrics) wrote(result string) {
	if m != nil {
		m.writes.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) setPending(n int) {
	if m != nil {
		m.pending.Set(float64(n))
	}
}
