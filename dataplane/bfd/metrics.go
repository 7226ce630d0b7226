package bfd

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exposes a Manager's sessions as Prometheus metrics; the agent registers it.
type Collector struct {
	m *Manager
}

// NewCollector returns a collector reading m at every scrape.
func NewCollector(m *Manager) *Collector { return &Collector{m: m} }

var (
	labels      = []string{"peer", "interface"}
	descState   = prometheus.NewDesc("egressd_bfd_session_state", "1 for the current state of each BFD session.", append(labels, "state"), nil)
	descTrans   = prometheus.NewDesc("egressd_bfd_state_transitions_total", "State transitions of a BFD session.", labels, nil)
	descSent    = prometheus.NewDesc("egressd_bfd_packets_sent_total", "BFD control packets sent.", labels, nil)
	descRecv    = prometheus.NewDesc("egressd_bfd_packets_received_total", "BFD control packets received and accepted.", labels, nil)
	descDetect  = prometheus.NewDesc("egressd_bfd_detection_time_seconds", "Negotiated detection time of a BFD session.", labels, nil)
	descChange  = prometheus.NewDesc("egressd_bfd_last_state_change_timestamp_seconds", "When a BFD session last changed state (Down after a failure is its last detection).", labels, nil)
	descDropped = prometheus.NewDesc("egressd_bfd_packets_dropped_total", "Received BFD packets discarded: malformed, wrong TTL, unknown session, or failing RFC 5880 checks.", []string{"reason"}, nil)
	allStates   = []State{AdminDown, Down, Init, Up}
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descTrans, descSent, descRecv, descDetect, descChange, descDropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.m.Sessions() {
		l := []string{s.Key.Peer.String(), s.Key.Interface}
		for _, st := range allStates {
			v := 0.0
			if st == s.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, append(l, st.String())...)
		}
		ch <- prometheus.MustNewConstMetric(descTrans, prometheus.CounterValue, float64(s.Counters.Transitions), l...)
		ch <- prometheus.MustNewConstMetric(descSent, prometheus.CounterValue, float64(s.Counters.PacketsSent), l...)
		ch <- prometheus.MustNewConstMetric(descRecv, prometheus.CounterValue, float64(s.Counters.PacketsReceived), l...)
		ch <- prometheus.MustNewConstMetric(descDetect, prometheus.GaugeValue, s.DetectionTime.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(descChange, prometheus.GaugeValue, float64(s.LastChange.UnixNano())/1e9, l...)
	}
	for reason, n := range c.m.Dropped() {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(n), reason)
	}
}
