package kernel

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
)

// Collectors are the dataplane's Prometheus metrics.
func (d *Applier) Collectors() []prometheus.Collector {
	afterDNAT := func() map[classifier.RuleRef]classifier.Counters {
		out := map[classifier.RuleRef]classifier.Counters{}
		for o, c := range d.nft.Counters() {
			out[classifier.RuleRef{Namespace: o.Namespace, Rule: o.Rule}] = classifier.Counters{Packets: c.Packets, Bytes: c.Bytes}
		}
		return out
	}
	if d.phases == nil { // an Applier not made by New: the metrics reference describes it
		d.phases, d.eventsLost, d.reattached, d.tableLost, d.strictRPFilter = newPhases(), newEventsLost(), newReattached(), newTableLost(), newStrictRPFilter()
		d.pruneFailures, d.ipv6RPCheck = newPruneFailures(), newIPv6RPCheck()
	}
	return []prometheus.Collector{classifier.NewCollector(d.classifier, afterDNAT), nft.NewCollector(d.nft), bfdCollector{d},
		d.phases, d.eventsLost, d.reattached, d.tableLost, d.strictRPFilter, d.ipv6RPCheck, d.pruneFailures}
}

func newTableLost() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "egressd_nftables_table_lost_total",
		Help: "Times egressd found its nftables table (inet egressd) deleted, or chains of it removed, behind its back (a `nft flush ruleset` elsewhere); it writes it again at once. Looked at every 5 s.",
	})
}

func newPhases() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "egressd_dataplane_apply_phase_duration_seconds",
		Help:    "Duration of one phase of applying the node's state to the kernel (nftables, addresses, bfd, tunnel, routing, classifier, attach, removals).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}, []string{"phase"})
}
