package egressip

import (
	"time"

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
	// Reassignment is the time from the leader finding a node unable to keep its egress IPs to
	// the status that places them on another node.
	Reassignment prometheus.Histogram
	// Unassigned counts, per EgressIP and reason, the requested IPs the leader's last
	// assignment left without a node (alerts: an EgressIP that silently does nothing).
	Unassigned *prometheus.GaugeVec
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
		Reassignment: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressd_egressip_reassignment_seconds",
			Help:    "Time from the leader finding a node unable to keep its egress IPs (NotReady, unreachable, unlabelled, gone) to writing the status that places them on another node; detection before that is the probes' (egressd_reachability_*).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		Unassigned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressd_egressip_unassigned",
			Help: "Requested egress IPs the leader's last assignment left without a node, by EgressIP object and reason (the Event reason: NoMatchingNodeFound, EgressIPConflict, InvalidEgressIP, ...); only the leader exports it.",
		}, []string{"egressip", "reason"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Assigned, m.Moves, m.Reassignment, m.Unassigned}
}

// record updates the metrics after an object's status went from old to items at now; lost
// says since when the leader has found each node unable to keep egress IPs.
func (m *Metrics) record(name string, old, items []ovnv1.EgressIPStatusItem, lost map[string]time.Time, now time.Time) {
	kept := map[ovnv1.EgressIPStatusItem]bool{}
	placed := map[string]string{} // egress IP -> node
	for _, it := range items {
		kept[it] = true
		placed[it.EgressIP] = it.Node
		m.Assigned.WithLabelValues(name, it.Node, it.EgressIP).Set(1)
	}
	for _, it := range old {
		if kept[it] {
			continue
		}
		m.Moves.WithLabelValues(it.Node).Inc()
		m.Assigned.DeleteLabelValues(name, it.Node, it.EgressIP)
		if since, ok := lost[it.Node]; ok && placed[it.EgressIP] != "" {
			m.Reassignment.Observe(now.Sub(since).Seconds())
		}
	}
}

// observeUnassigned replaces Unassigned with what plan left without a node.
func (m *Metrics) observeUnassigned(plan Plan) {
	m.Unassigned.Reset()
	for _, a := range plan.Assignments {
		for _, u := range a.Unassigned {
			m.Unassigned.WithLabelValues(a.Name, u.Reason).Inc()
		}
	}
}

// forget drops what only the leader exports, once this replica stops leading: another
// reports the assignment now.
func (m *Metrics) forget() {
	m.Assigned.Reset()
	m.Unassigned.Reset()
}
