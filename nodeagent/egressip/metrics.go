package egressip

import (
	"github.com/prometheus/client_golang/prometheus"

	ovnv1 "github.com/egressd/egressd/api/k8sovn/v1"
)

// Metrics of the leader's assignment.
type Metrics struct {
	// Assigned is 1 per (EgressIP, node, egress IP) the leader's status holds.
	Assigned *prometheus.GaugeVec
	// Moves counts egress IPs the leader took off a node (unassignable, unreachable, NotReady,
	// unlabelled) to place them again, by the node they left.
	Moves *prometheus.CounterVec
}

// NewMetrics creates the metrics; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		Assigned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressd_egressip_assigned",
			Help: "Egress IPs assigned by the leader, by EgressIP object and node (1 per IP).",
		}, []string{"egressip", "node", "ip"}),
		Moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_egressip_moves_total",
			Help: "Egress IPs the leader removed from a node's assignment (failovers and unassignments), by that node.",
		}, []string{"node"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Assigned, m.Moves}
}

// record updates the metrics after an object's status went from old to items.
func (m *Metrics) record(name string, old, items []ovnv1.EgressIPStatusItem) {
	kept := map[ovnv1.EgressIPStatusItem]bool{}
	for _, it := range items {
		kept[it] = true
		m.Assigned.WithLabelValues(name, it.Node, it.EgressIP).Set(1)
	}
	for _, it := range old {
		if !kept[it] {
			m.Moves.WithLabelValues(it.Node).Inc()
			m.Assigned.DeleteLabelValues(name, it.Node, it.EgressIP)
		}
	}
}
