package classifier

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/internal/promdesc"
)

// Collector exposes the classifier's per-rule counters and policy sizes; the agent registers it.
type Collector struct {
	c *Classifier
	// moreFirewall are firewall rule counters kept elsewhere (drops after DNAT), added to the
	// classifier's.
	moreFirewall func() map[RuleRef]Counters
}

// NewCollector returns a collector reading c, and moreFirewall when not nil, at every scrape.
func NewCollector(c *Classifier, moreFirewall func() map[RuleRef]Counters) *Collector {
	return &Collector{c: c, moreFirewall: moreFirewall}
}

var (
	descFwPackets  = promdesc.New("egressd_egressfirewall_rule_packets_total", "Packets that matched an EgressFirewall rule on this node (the rule decided their fate).", prometheus.CounterValue, "namespace", "rule", "action")
	descFwBytes    = promdesc.New("egressd_egressfirewall_rule_bytes_total", "Bytes of packets that matched an EgressFirewall rule on this node.", prometheus.CounterValue, "namespace", "rule", "action")
	descQoSMarked  = promdesc.New("egressd_egressqos_marked_packets_total", "Packets an EgressQoS rule marked (set the DSCP of) on this node.", prometheus.CounterValue, "namespace", "rule", "dscp")
	descFwUnparsed = promdesc.New("egressd_egressfirewall_unparsed_packets_total", "Packets from pods under an EgressFirewall on this node whose transport header the classifier did not read (more than 4 IPv6 extension headers, or a header cut short), by what the firewall did: judged (by destination alone, since no rule restricted to ports could decide them), dropped (a rule restricted to ports could: a port rule is never skipped by hiding the port).", prometheus.CounterValue, "result")
	descFwFrags    = promdesc.New("egressd_egressfirewall_fragments_total", "Fragments of datagrams from pods under an EgressFirewall on this node, by what the firewall did: tracked (a first fragment, whose verdict the rest follow), followed (a later fragment judged by its first), unmatched (a later fragment whose first was not seen, judged by destination alone), dropped (a later fragment whose first was not seen, dropped since rules restricted to ports could decide it).", prometheus.CounterValue, "result")
	descSpoofed    = promdesc.New("egressd_spoofed_packets_total", "Packets (and ARP messages) from pods dropped on this node for a forged source address (an interface that faces pods alone, and each port of such a bridge, lets out only the addresses of the pods behind it), by reason: unknown_source (no pod of the node has it), other_pod (a pod behind another interface or port has it). Whatever the pod's policies.", prometheus.CounterValue, "reason")
	descFirewalls  = promdesc.New("egressd_egressfirewalls", "EgressFirewalls programmed on this node.", prometheus.GaugeValue)
	descFwRules    = promdesc.New("egressd_egressfirewall_rules", "EgressFirewall rules programmed on this node.", prometheus.GaugeValue)
)

// ruleInfo is what the metrics say about a rule besides its counters, as of the last Apply.
type ruleInfo struct {
	mu        sync.Mutex
	fwAction  map[RuleRef]string
	qosDSCP   map[RuleRef]uint8
	firewalls int
	// actionsOf is the list of firewalls fwAction was computed from, when none of them failed
	// (zero: none).
	actionsOf listKey
}

// Describe implements prometheus.Collector.
func (m *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []promdesc.Desc{descFwPackets, descFwBytes, descQoSMarked, descFirewalls, descFwRules, descFwFrags, descFwUnparsed, descSpoofed} {
		ch <- d.Desc
	}
}

// Collect implements prometheus.Collector.
func (m *Collector) Collect(ch chan<- prometheus.Metric) {
	info := &m.c.info
	info.mu.Lock()
	actions, dscps, firewalls, rules := info.fwAction, info.qosDSCP, info.firewalls, len(info.fwAction)
	info.mu.Unlock()
	ch <- descFirewalls.Sample(float64(firewalls))
	ch <- descFwRules.Sample(float64(rules))
	if fw, err := m.c.FirewallCounters(); err == nil {
		if m.moreFirewall != nil {
			for ref, v := range m.moreFirewall() {
				sum := fw[ref]
				fw[ref] = Counters{Packets: sum.Packets + v.Packets, Bytes: sum.Bytes + v.Bytes}
			}
		}
		for ref, v := range fw {
			action, ok := actions[ref]
			if !ok {
				continue // a rule that no longer exists
			}
			l := []string{ref.Namespace, strconv.Itoa(ref.Rule), action}
			ch <- descFwPackets.Sample(float64(v.Packets), l...)
			ch <- descFwBytes.Sample(float64(v.Bytes), l...)
		}
	}
	if sp, err := m.c.SpoofCounters(); err == nil {
		ch <- descSpoofed.Sample(float64(sp.Unknown), "unknown_source")
		ch <- descSpoofed.Sample(float64(sp.OtherPod), "other_pod")
	}
	if f, err := m.c.FragmentCounters(); err == nil {
		for result, v := range map[string]uint64{"tracked": f.Tracked, "followed": f.Followed, "unmatched": f.Unmatched, "dropped": f.Dropped} {
			ch <- descFwFrags.Sample(float64(v), result)
		}
	}
	if u, err := m.c.UnparsedCounters(); err == nil {
		ch <- descFwUnparsed.Sample(float64(u.Judged), "judged")
		ch <- descFwUnparsed.Sample(float64(u.Dropped), "dropped")
	}
	if q, err := m.c.QoSCounters(); err == nil {
		for ref, v := range q {
			dscp, ok := dscps[ref]
			if !ok {
				continue
			}
			ch <- descQoSMarked.Sample(float64(v.Packets), ref.Namespace, strconv.Itoa(ref.Rule), strconv.Itoa(int(dscp)))
		}
	}
}
