package bfd

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// SessionsFromMetrics reads the BFD sessions of a running agent from its scraped metrics (by
// family name): the sessions live in the agent's process, and the kernel only shows their
// effect (a gateway in or out of its nexthop group). Only the fields the metrics carry are set:
// Key, State, DetectionTime, LastChange and Counters.
func SessionsFromMetrics(families map[string]*dto.MetricFamily) ([]SessionInfo, error) {
	byKey := map[Key]*SessionInfo{}
	each := func(name string, f func(s *SessionInfo, labels map[string]string, value float64)) error {
		for _, m := range families[name].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			peer, err := netip.ParseAddr(labels["peer"])
			if err != nil {
				return fmt.Errorf("%s: peer label: %w", name, err)
			}
			k := Key{Peer: peer, Interface: labels["interface"]}
			if byKey[k] == nil {
				byKey[k] = &SessionInfo{Key: k, State: Down}
			}
			f(byKey[k], labels, value(m))
		}
		return nil
	}
	counter := func(field func(*Counters) *uint64) func(*SessionInfo, map[string]string, float64) {
		return func(s *SessionInfo, _ map[string]string, v float64) { *field(&s.Counters) = uint64(v) }
	}
	for name, f := range map[string]func(*SessionInfo, map[string]string, float64){
		metricState: func(s *SessionInfo, l map[string]string, v float64) {
			if i := slices.IndexFunc(allStates, func(st State) bool { return st.String() == l["state"] }); v == 1 && i >= 0 {
				s.State = allStates[i]
			}
		},
		metricSent:        counter(func(c *Counters) *uint64 { return &c.PacketsSent }),
		metricReceived:    counter(func(c *Counters) *uint64 { return &c.PacketsReceived }),
		metricTransitions: counter(func(c *Counters) *uint64 { return &c.Transitions }),
		metricDetections:  counter(func(c *Counters) *uint64 { return &c.Detections }),
		metricDetectionTime: func(s *SessionInfo, _ map[string]string, v float64) {
			s.DetectionTime = time.Duration(v * float64(time.Second))
		},
		metricLastChange: func(s *SessionInfo, _ map[string]string, v float64) {
			s.LastChange = time.Unix(0, int64(v*1e9))
		},
	} {
		if err := each(name, f); err != nil {
			return nil, err
		}
	}
	out := make([]SessionInfo, 0, len(byKey))
	for _, s := range byKey {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return a.Key.Peer.Compare(b.Key.Peer) })
	return out, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return m.GetUntyped().GetValue()
}
