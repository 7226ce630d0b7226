package reachability

import "github.com/prometheus/client_golang/prometheus"

// metrics of a Prober. Per-probe series carry no node label (their number stays fixed however
// large the cluster); the per-node gauge is deleted with its target.
type metrics struct {
	probes      *prometheus.CounterVec
	rtt         *prometheus.HistogramVec
	unreachable *prometheus.CounterVec
	reachable   *prometheus.GaugeVec
}

func newMetrics() *metrics {
	return &metrics{
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_reachability_probes_total",
			Help: "Node reachability probes by kind (connect: TCP handshake; health: gRPC Check) and outcome.",
		}, []string{"probe", "outcome"}),
		rtt: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "egressd_reachability_rtt_seconds",
			Help:    "Round-trip time of answered node reachability probes, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14), // 100us .. 0.8s
		}, []string{"probe"}),
		unreachable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_reachability_unreachable_total",
			Help: "Times a node was declared unreachable, by reason (host_silent, agent_absent).",
		}, []string{"reason"}),
		reachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressd_reachability_node_reachable",
			Help: "1 while the leader judges the node reachable, 0 otherwise.",
		}, []string{"node"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.probes, m.rtt, m.unreachable, m.reachable}
}

// observe counts one probe; the RTT only of probes that got an answer.
func (m *metrics) observe(kind string, o outcome, rtt float64) {
	m.probes.WithLabelValues(kind, o.String()).Inc()
	if o == answered || o == refused || o == serving {
		m.rtt.WithLabelValues(kind).Observe(rtt)
	}
}
