package bfd

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collectors are the Manager's Prometheus metrics, read at every scrape; the agent registers
// them with its other dataplane collectors.
func (m *Manager) Collectors() []prometheus.Collector { return []prometheus.Collector{collector{m}} }

type collector struct{ m *Manager }

// Names of the per-session metrics, which egressctl reads back (SessionsFromMetrics).
const (
	metricState         = "egressd_bfd_session_state"
	metricTransitions   = "egressd_bfd_state_transitions_total"
	metricDetections    = "egressd_bfd_detection_events_total"
	metricSent          = "egressd_bfd_packets_sent_total"
	metricReceived      = "egressd_bfd_packets_received_total"
	metricDetectionTime = "egressd_bfd_detection_time_seconds"
	metricLastChange    = "egressd_bfd_last_state_change_timestamp_seconds"
)

var (
	labels      = []string{"peer", "interface"}
	descByState = prometheus.NewDesc("egressd_bfd_sessions", "BFD sessions in each state.", []string{"state"}, nil)
	descState   = prometheus.NewDesc(metricState, "1 for the current state of each BFD session.", append(labels, "state"), nil)
	descTrans   = prometheus.NewDesc(metricTransitions, "State transitions of a BFD session.", labels, nil)
	descDetect  = prometheus.NewDesc(metricDetections, "Times a BFD session went Down because the peer fell silent for the detection time.", labels, nil)
	descSent    = prometheus.NewDesc(metricSent, "BFD control packets sent.", labels, nil)
	descRecv    = prometheus.NewDesc(metricReceived, "BFD control packets received and accepted.", labels, nil)
	descDetTime = prometheus.NewDesc(metricDetectionTime, "Negotiated detection time of a BFD session.", labels, nil)
	descChange  = prometheus.NewDesc(metricLastChange, "When a BFD session last changed state.", labels, nil)
	descDropped = prometheus.NewDesc("egressd_bfd_packets_dropped_total", "Received BFD packets discarded: malformed, wrong TTL, unknown session, or failing RFC 5880 checks.", []string{"reason"}, nil)
	allStates   = []State{AdminDown, Down, Init, Up}
)

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descByState, descState, descTrans, descDetect, descSent, descRecv, descDetTime, descChange, descDropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	byState := map[State]int{}
	for _, s := range c.m.Sessions() {
		byState[s.State]++
		l := []string{s.Key.Peer.String(), s.Key.Interface}
		for _, st := range allStates {
			v := 0.0
			if st == s.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, append(l, st.String())...)
		}
		ch <- prometheus.MustNewConstMetric(descTrans, prometheus.CounterValue, float64(s.Counters.Transitions), l...)
		ch <- prometheus.MustNewConstMetric(descDetect, prometheus.CounterValue, float64(s.Counters.Detections), l...)
		ch <- prometheus.MustNewConstMetric(descSent, prometheus.CounterValue, float64(s.Counters.PacketsSent), l...)
		ch <- prometheus.MustNewConstMetric(descRecv, prometheus.CounterValue, float64(s.Counters.PacketsReceived), l...)
		ch <- prometheus.MustNewConstMetric(descDetTime, prometheus.GaugeValue, s.DetectionTime.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(descChange, prometheus.GaugeValue, float64(s.LastChange.UnixNano())/1e9, l...)
	}
	// Every state and reason, zeros included, so that alerts see a series from the start.
	for _, st := range allStates {
		ch <- prometheus.MustNewConstMetric(descByState, prometheus.GaugeValue, float64(byState[st]), st.String())
	}
	for reason, n := range c.m.dropCounts() {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(n), reason)
	}
}
