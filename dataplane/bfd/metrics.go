package bfd

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/internal/promdesc"
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
	descByState = promdesc.New("egressd_bfd_sessions", "BFD sessions in each state.", prometheus.GaugeValue, "state")
	descState   = promdesc.New(metricState, "1 for the current state of each BFD session.", prometheus.GaugeValue, "peer", "interface", "state")
	descTrans   = promdesc.New(metricTransitions, "State transitions of a BFD session.", prometheus.CounterValue, "peer", "interface")
	descDetect  = promdesc.New(metricDetections, "Times a BFD session went Down because the peer fell silent for the detection time.", prometheus.CounterValue, "peer", "interface")
	descSent    = promdesc.New(metricSent, "BFD control packets sent.", prometheus.CounterValue, "peer", "interface")
	descRecv    = promdesc.New(metricReceived, "BFD control packets received and accepted.", prometheus.CounterValue, "peer", "interface")
	descDetTime = promdesc.New(metricDetectionTime, "Negotiated detection time of a BFD session.", prometheus.GaugeValue, "peer", "interface")
	descChange  = promdesc.New(metricLastChange, "When a BFD session last changed state.", prometheus.GaugeValue, "peer", "interface")
	descDropped = promdesc.New("egressd_bfd_packets_dropped_total", "Received BFD packets discarded: malformed, wrong TTL, unknown session, or failing RFC 5880 checks.", prometheus.CounterValue, "reason")
	allStates   = []State{AdminDown, Down, Init, Up}
)

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) { Describe(ch) }

// Describe sends the descriptors of the Manager's metrics, also before any Manager exists (the
// dataplane starts one with the first BFD session).
func Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []promdesc.Desc{descByState, descState, descTrans, descDetect, descSent, descRecv, descDetTime, descChange, descDropped} {
		ch <- d.Desc
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
			ch <- descState.Sample(v, append(l, st.String())...)
		}
		ch <- descTrans.Sample(float64(s.Counters.Transitions), l...)
		ch <- descDetect.Sample(float64(s.Counters.Detections), l...)
		ch <- descSent.Sample(float64(s.Counters.PacketsSent), l...)
		ch <- descRecv.Sample(float64(s.Counters.PacketsReceived), l...)
		ch <- descDetTime.Sample(s.DetectionTime.Seconds(), l...)
		ch <- descChange.Sample(float64(s.LastChange.UnixNano())/1e9, l...)
	}
	// Every state and reason, zeros included, so that alerts see a series from the start.
	for _, st := range allStates {
		ch <- descByState.Sample(float64(byState[st]), st.String())
	}
	for reason, n := range c.m.dropCounts() {
		ch <- descDropped.Sample(float64(n), reason)
	}
}
