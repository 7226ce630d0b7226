package status

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the node's report: how its writes went.
type Metrics struct {
	writes *prometheus.CounterVec
}

// NewMetrics creates the metrics; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_status_writes_total",
			Help: "Writes of this node's NodeReport (what it programmed of the EgressFirewalls, EgressQoSes and AdminPolicyBasedExternalRoutes, from which the controller writes their status), by result: written, failed (tried again after a wait growing from 1 s to 30 s).",
		}, []string{"result"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.writes}
}

func (m *Metrics) wrote(result string) {
	if m != nil {
		m.writes.WithLabelValues(result).Inc()
	}
}
