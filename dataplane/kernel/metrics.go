package kernel

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
)

// metrics are the Applier's own metrics, shared with the facilities and components that count.
type metrics struct {
	// phases times each phase of Apply: where a slow sync spends its time.
	phases *prometheus.HistogramVec
	// eventsLost counts the event subscriptions that failed (kernelEvents.watch).
	eventsLost prometheus.Counter
	// tableLost counts the times egressd's nftables table was found not whole (checkTable).
	tableLost prometheus.Counter
	// reattached counts hooks found deleted behind egressd's back, attached again.
	reattached prometheus.Counter
	// strictRPFilter and ipv6RPCheck: what reversePath and reversePath6 found.
	strictRPFilter *prometheus.GaugeVec
	ipv6RPCheck    *prometheus.GaugeVec
	// pruneFailures counts the removals that failed, by facility.
	pruneFailures *prometheus.CounterVec
	// skipped counts the phases an Apply skipped, by facility (sectioned).
	skipped *prometheus.CounterVec
	// conflicts: the CNI settings that undo what egressd programs (Result.Conflicts).
	conflicts *prometheus.GaugeVec
}

func newMetrics() *metrics {
	return &metrics{phases: newPhases(), eventsLost: newEventsLost(), tableLost: newTableLost(), reattached: newReattached(),
		strictRPFilter: newStrictRPFilter(), ipv6RPCheck: newIPv6RPCheck(), pruneFailures: newPruneFailures(), skipped: newSkipped(), conflicts: newConflicts()}
}

// Collectors are the dataplane's Prometheus metrics.
func (d *Applier) Collectors() []prometheus.Collector {
	var table *nft.Table
	if d.nft != nil {
		table = d.nft.table
	}
	afterDNAT := func() map[classifier.RuleRef]classifier.Counters {
		out := map[classifier.RuleRef]classifier.Counters{}
		for o, c := range table.Counters() {
			out[classifier.RuleRef{Namespace: o.Namespace, Rule: o.Rule}] = classifier.Counters{Packets: c.Packets, Bytes: c.Bytes}
		}
		return out
	}
	m := d.metrics
	if m == nil { // an Applier not made by New: the metrics reference describes it
		m = newMetrics()
	}
	return []prometheus.Collector{classifier.NewCollector(d.classifier, afterDNAT), nft.NewCollector(table), bfdCollector{d.bfd},
		m.phases, m.eventsLost, m.reattached, m.tableLost, m.strictRPFilter, m.ipv6RPCheck, m.pruneFailures, m.skipped, m.conflicts}
}

func newConflicts() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "egressd_cni_conflicts",
		Help: "Settings of a CNI's programs on egressd's path that undo what egressd programs, by program and setting: the number of pod interfaces where Cilium's cil_from_container, after egressd's classifier, runs with enable_identity_mark (overwrites the steering mark: steered traffic is dropped, or takes the path its identity bits name; Helm enableIdentityMark false) or enable_bpf_host_routing (redirects past the host's routing: steered traffic leaves with the node's address; Helm bpf.hostLegacyRouting true), looked at when the classifier is attached there, again within 5 s and at 15, 30 and 60 s, and when Cilium's node_config.h changes; 1 for cil_to_netdev with ENABLE_MASQUERADE_IPV4 or ENABLE_MASQUERADE_IPV6, compiled in from Cilium's node_config.h (BPF masquerading: steered traffic leaves with the node's address; Helm bpf.masquerade false); and the number of addresses egressd SNATs to for which Cilium's load balancer holds a wildcard entry (cil_from_netdev, bpf-lb-enable-wildcard-entries: the replies are dropped); these two looked at when the addresses change and every 5 s. docs/compat.md.",
	}, []string{"program", "setting"})
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

func newPruneFailures() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egressd_dataplane_prune_failures_total",
		Help: "Removals of kernel objects egressd no longer wants (rules, routes and nexthops; tunnel entries; egress addresses) that failed, by facility (routing, tunnel, addresses): the objects stay until a removal succeeds. The sync is retried with a backoff (100 ms doubling to 30 s) while they fail.",
	}, []string{"facility"})
}

func newSkipped() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egressd_dataplane_apply_phase_skipped_total",
		Help: "Phases of applying the node's state that had nothing to do, by facility (nftables, addresses, tunnel, routing): its part of the state was the one it last applied without a failure, and the kernel told of no change since; every facility, the classifier and attach included, when the whole state was and no pod interface changed (for at most a minute after the last Apply that ran). Each runs in full at least every --sync-period, which repairs what changed unseen.",
	}, []string{"facility"})
}
