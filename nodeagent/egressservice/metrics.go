package egressservice

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the leader's host election.
type Metrics struct {
	// Hosted is the number of EgressServices whose status.host names each node.
	Hosted *prometheus.GaugeVec
	// Moves counts EgressServices the leader took off a node (to another host or to none), by
	// that node.
	Moves *prometheus.CounterVec
}

// NewMetrics creates the metrics; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		Hosted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressd_egressservice_hosted",
			Help: "EgressServices whose host the leader elected, by host node (\"ALL\" for sourceIPBy Network).",
		}, []string{"node"}),
		Moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_egressservice_moves_total",
			Help: "EgressServices the leader took off their host node (re-elections: the node NotReady, unreachable, no longer selected, without endpoint for ETP=Local; or no host left), by that node.",
		}, []string{"node"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Hosted, m.Moves}
}

// forget drops the per-host gauge once this replica stops leading: another reports it now.
func (m *Metrics) forget() { m.Hosted.Reset() }

// record sets the services per host from the hosts of every EgressService, and counts the
// moves off a node (from, to) the last reconcile wrote.
func (m *Metrics) record(hosts []string, moves [][2]string) {
	count := map[string]int{}
	for _, h := range hosts {
		if h != NoHost {
			count[h]++
		}
	}
	m.Hosted.Reset()
	for h, n := range count {
		m.Hosted.WithLabelValues(h).Set(float64(n))
	}
	for _, mv := range moves {
		if mv[0] != NoHost && mv[0] != NoSNATHost && mv[0] != mv[1] {
			m.Moves.WithLabelValues(mv[0]).Inc()
		}
	}
}
