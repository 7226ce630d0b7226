package bfd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ScrapeSessions reads the BFD sessions of a running agent from its metrics endpoint (url, the
// agent's /metrics): the sessions live in the agent's process, and the kernel only shows their
// effect (a gateway in or out of its nexthop group). Only the fields the metrics carry are set:
// Key, State, DetectionTime, LastChange and Counters.
func ScrapeSessions(ctx context.Context, url string) ([]SessionInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parseSessions(resp.Body)
}

// parseSessions gathers the per-session series of the text exposition format by peer and
// interface.
func parseSessions(r io.Reader) ([]SessionInfo, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
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
