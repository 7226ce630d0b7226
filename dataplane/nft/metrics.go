package nft

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/internal/promdesc"
)

var (
	descSNATPackets = promdesc.New("egressd_egressip_snat_packets_total",
		"Packets that left this node SNATed to an egress IP it hosts.", prometheus.CounterValue, "egress_ip")
	descSNATBytes = promdesc.New("egressd_egressip_snat_bytes_total",
		"Bytes that left this node SNATed to an egress IP it hosts.", prometheus.CounterValue, "egress_ip")
	descLeakDrops = promdesc.New("egressd_egressip_leak_drops_total",
		"Packets of pods served by an EgressIP that the leak guard dropped rather than let leave with the pod address: "+
			"unsteered (not SNATed), misrouted (steered, but towards no egress node of its path) or "+
			"unknown_pod (another node's pod, steered here before this node learnt it from the API).", prometheus.CounterValue, "reason")
)

// collector exports the table's EgressIP counters.
type collector struct{ t *Table }

// NewCollector is the Prometheus collector of the table's EgressIP counters.
func NewCollector(t *Table) prometheus.Collector { return collector{t} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSNATPackets.Desc
	ch <- descSNATBytes.Desc
	ch <- descLeakDrops.Desc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for ip, n := range c.t.EgressIPCounters() {
		ch <- descSNATPackets.Sample(float64(n.Packets), ip.String())
		ch <- descSNATBytes.Sample(float64(n.Bytes), ip.String())
	}
	d := c.t.LeakDrops()
	ch <- descLeakDrops.Sample(float64(d.Unsteered.Packets), "unsteered")
	ch <- descLeakDrops.Sample(float64(d.Misrouted.Packets), "misrouted")
	ch <- descLeakDrops.Sample(float64(d.Unknown.Packets), "unknown_pod")
}
