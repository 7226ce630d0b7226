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
	descGatewaysGone = promdesc.New("egressd_externalroute_gateway_removals_total",
		"External gateways whose return path went from this node (removed from their policies, or their BFD session no longer Up): "+
			"the conntrack entries of the connections they brought to local pods were deleted.", prometheus.CounterValue)
	descGatewayFlows = promdesc.New("egressd_externalroute_conntrack_deleted_total",
		"Conntrack entries deleted because the external gateway their connection came through went.", prometheus.CounterValue)
	descFrontendDrops = promdesc.New("egressd_egressfirewall_frontend_drops_total",
		"New flows of pods under an EgressFirewall to a Service's load-balancer, external or node-port address and port that no DNAT "+
			"translated (no endpoint, or kube-proxy not serving the Service), rejected rather than let reach that address unjudged.", prometheus.CounterValue)
	descLeakDrops = promdesc.New("egressd_egressip_leak_drops_total",
		"Packets of pods served by an EgressIP that the leak guard dropped rather than let leave with the pod address: "+
			"unsteered (not SNATed), misrouted (steered, but towards no egress node of its path) or "+
			"unknown_pod (another node's pod, steered here before this node learnt it from the API).", prometheus.CounterValue, "reason")
)

// collector exports the table's EgressIP counters, its frontend drops and its external gateways' flushes.
type collector struct{ t *Table }

// NewCollector is the Prometheus collector of the table's EgressIP counters.
func NewCollector(t *Table) prometheus.Collector { return collector{t} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSNATPackets.Desc
	ch <- descSNATBytes.Desc
	ch <- descLeakDrops.Desc
	ch <- descFrontendDrops.Desc
	ch <- descGatewaysGone.Desc
	ch <- descGatewayFlows.Desc
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
	ch <- descFrontendDrops.Sample(float64(c.t.FrontendDrops().Packets))
	gone, entries := c.t.gatewayFlushes()
	ch <- descGatewaysGone.Sample(float64(gone))
	ch <- descGatewayFlows.Sample(float64(entries))
}
